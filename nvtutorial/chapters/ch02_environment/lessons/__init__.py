"""The scripts notebook 02 teaches: plain ``torchrun`` scripts, shown from the file that runs."""
