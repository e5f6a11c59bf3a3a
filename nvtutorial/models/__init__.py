"""What the lessons train: the course UNet and its synthetic segmentation data; the transformer of notebook 08."""
