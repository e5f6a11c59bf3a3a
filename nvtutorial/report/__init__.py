"""Reading results in the notebook: tables and verdicts from RunResults. Never launches, never draws."""
