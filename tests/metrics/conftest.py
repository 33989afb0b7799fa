"""The metrics tests share the cluster tests' connection (one local Ray per session)."""

from tests.cluster.conftest import js, stream_name  # noqa: F401
