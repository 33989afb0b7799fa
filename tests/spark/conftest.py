"""The Spark and Ray Data tests share the cluster tests' connection (one local Ray per
session); the one RayDP Spark session is started by the Spark test module itself."""

import pytest

from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401


@pytest.fixture(autouse=True)
def _cleanup(drop_new_streams):  # noqa: F811 - the fixture imported above
    yield


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: starts a RayDP Spark session (Java 17, ~30 s)")
