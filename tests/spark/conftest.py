"""The Spark and Ray Data tests share the cluster tests' connection (one local Ray per
session); the one RayDP Spark session is started by the Spark test module itself."""

import logging

import pytest

from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401


@pytest.fixture(autouse=True)
def _cleanup(drop_new_streams):  # noqa: F811 - the fixture imported above
    yield


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: starts a RayDP Spark session (Java 17, ~30 s)")


class _Console(logging.Handler):
    """What Ray Data's console handler would print: its records at INFO and above, except
    those marked ``hide`` (Ray Data keeps them for its log file)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not getattr(record, "hide", False):
            self.lines.append(record.getMessage())

    def take(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines


@pytest.fixture
def ray_data_console():
    console = _Console()
    log = logging.getLogger("ray.data")
    log.addHandler(console)
    try:
        yield console
    finally:
        log.removeHandler(console)
