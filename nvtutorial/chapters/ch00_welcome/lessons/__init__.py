"""The scripts notebook 00 teaches: plain ``torchrun`` scripts, shown from the file that runs."""
