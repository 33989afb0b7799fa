"""A rayjet connection on the session's local Ray, shared by the cluster tests."""

from __future__ import annotations

import itertools

import pytest

import rayjet

_names = itertools.count()


@pytest.fixture(scope="session")
def js(ray_session, tmp_path_factory):
    conn = rayjet.connect(data_dir=tmp_path_factory.mktemp("rayjet-data"), timeout=20)
    yield conn
    conn.close()


@pytest.fixture
def stream_name(request):
    base = "".join(ch for ch in request.node.name if ch.isalnum()).upper()[:40]
    return f"{base}{next(_names)}"
