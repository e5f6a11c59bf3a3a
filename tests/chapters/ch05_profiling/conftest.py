"""The chapter's fixtures that more than one of its test files uses."""

from tests.helpers.profile_step_results import ref  # noqa: F401 - a fixture
