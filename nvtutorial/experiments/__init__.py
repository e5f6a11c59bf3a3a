"""Kernel side: labs made of several runs (link A/B, nsys, the pitfall traps); with
``launch.py`` the only code that starts runs."""
