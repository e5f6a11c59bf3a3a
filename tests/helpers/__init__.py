"""Helpers and fakes shared by the tests (tests/README.md: where each kind of test lives)."""
