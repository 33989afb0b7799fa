"""A rayjet connection on the session's local Ray, shared by the cluster tests."""

from __future__ import annotations

import itertools

import pytest

import rayjet
from tests.replicas import hosting_for_tests

_names = itertools.count()


@pytest.fixture(scope="session")
def js(ray_session, tmp_path_factory):
    conn = rayjet.connect(data_dir=tmp_path_factory.mktemp("rayjet-data"), timeout=20,
                          hosting=hosting_for_tests())
    yield conn
    conn.close()


@pytest.fixture
def stream_name(request):
    base = "".join(ch for ch in request.node.name if ch.isalnum()).upper()[:40]
    return f"{base}{next(_names)}"


@pytest.fixture
def drop_new_streams(js):
    """Delete the streams a test created (idle replicas still tick and load the machine)."""
    before = set(js.stream_names())
    yield
    for name in set(js.stream_names()) - before:
        try:
            js.delete_stream(name)
        except Exception:  # noqa: BLE001 - best effort: the test's own outcome stands
            pass
