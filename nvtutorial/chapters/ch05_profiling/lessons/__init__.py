"""The scripts notebook 05 teaches: plain ``torchrun`` scripts, shown from the file that runs."""
