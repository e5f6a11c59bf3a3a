"""Kernel side: data -> (fig, ax). Never launches; style.py is the course's one plot style."""
