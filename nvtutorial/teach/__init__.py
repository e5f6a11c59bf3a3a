"""Notebook helpers: show code from the file that runs, run cells on ranks, grade predictions, check exercises."""
