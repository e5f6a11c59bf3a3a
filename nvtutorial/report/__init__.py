"""Kernel side: results -> tables and verdicts. Never launches, never draws."""
