"""The scripts notebook 07 teaches: plain ``torchrun`` scripts, shown from the file that runs."""
