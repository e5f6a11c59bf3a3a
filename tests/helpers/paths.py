"""Where the tests find the repository and their own data, wherever a test file sits under tests/."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
SCRIPTS = TESTS / "scripts"
DATA = TESTS / "data"
