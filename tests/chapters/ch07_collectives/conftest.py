"""The chapter's fixtures that more than one of its test files uses."""

from tests.helpers.collectives_ranks import cpu_hooks, plain_pool, pool  # noqa: F401 - fixtures
from tests.helpers.collectives_runs import bench, hooks  # noqa: F401 - fixtures
