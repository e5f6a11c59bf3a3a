"""Notebook 11's lesson script: a plain ``torchrun`` file, shown in the notebook from the file that runs."""
