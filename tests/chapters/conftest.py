"""The fixtures that more than one test file of this folder uses."""

from tests.helpers.reference_ab import ab  # noqa: F401 - fixtures
