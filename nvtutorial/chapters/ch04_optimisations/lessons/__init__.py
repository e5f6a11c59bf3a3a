"""The scripts notebook 04 teaches: plain ``torchrun`` scripts, shown from the file that runs."""
