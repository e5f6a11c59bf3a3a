"""The scripts notebook 01 teaches: plain ``torchrun`` scripts, shown from the file that runs."""
