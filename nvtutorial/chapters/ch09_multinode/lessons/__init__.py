"""The scripts notebook 09 teaches: plain ``torchrun`` scripts, shown from the file that runs."""
