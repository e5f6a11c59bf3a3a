"""The scripts notebook 03 teaches: plain ``torchrun`` scripts, shown from the file that runs."""
