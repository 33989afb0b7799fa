"""The Spark and Ray Data tests share the cluster tests' connection (one local Ray per
session); the one RayDP Spark session is started by the Spark test module itself."""

from tests.cluster.conftest import js, stream_name  # noqa: F401


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: starts a RayDP Spark session (Java 17, ~30 s)")
