"""The code the course teaches: short plain files that run with ``torchrun`` as they are."""
