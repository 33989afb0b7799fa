"""Mirror and source tests share the cluster tests' session connection."""

from tests.cluster.conftest import js, stream_name  # noqa: F401
