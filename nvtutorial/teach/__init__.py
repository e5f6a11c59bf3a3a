"""Notebook helpers: show code from its file, %%ranks (cells on real ranks), predictions, checkers."""
