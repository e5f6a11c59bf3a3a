"""Notebook 10's lesson scripts: plain ``torchrun`` files, shown in the notebook from the file that runs."""
