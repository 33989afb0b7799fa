"""Mirror and source tests share the cluster tests' session connection."""

import pytest

from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401


@pytest.fixture(autouse=True)
def _cleanup(drop_new_streams):  # noqa: F811 - the fixture imported above
    yield
