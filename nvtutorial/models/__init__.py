"""What the lessons train: models and their synthetic data."""
