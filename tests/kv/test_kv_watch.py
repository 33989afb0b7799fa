"""KV watch: current values, one None, then live changes (ordered consumer underneath)."""

from __future__ import annotations

import pytest

from rayjet import KeyValueConfig, StorageType
from rayjet.api import KeyValueOp


@pytest.fixture
def kv(js, stream_name):
    bucket = stream_name.lower()
    store = js.create_key_value(KeyValueConfig(bucket=bucket, history=5,
                                               storage=StorageType.MEMORY))
    yield store
    js.delete_key_value(bucket)


def test_watch_initial_values_marker_then_updates(kv):
    kv.put("a.x", b"1")
    kv.put("a.y", b"2")
    kv.put("a.x", b"3")
    kv.put("b.z", b"other")
    w = kv.watch("a.*")
    initial = [w.updates(10) for _ in range(3)]
    assert [(e.key, e.value) for e in initial[:2]] == [("a.y", b"2"), ("a.x", b"3")]
    assert initial[2] is None  # end of the current values
    kv.put("a.y", b"4")
    kv.delete("a.x")
    e1, e2 = w.updates(10), w.updates(10)
    assert (e1.key, e1.value, e1.operation) == ("a.y", b"4", KeyValueOp.PUT)
    assert (e2.key, e2.operation) == ("a.x", KeyValueOp.DELETE)
    w.stop()


def test_watch_history_ignore_deletes_and_empty_bucket(kv):
    w = kv.watch(">")
    assert w.updates(10) is None  # nothing yet: the marker comes at once
    w.stop()
    kv.put("k", b"1")
    kv.put("k", b"2")
    kv.delete("k")
    kv.put("k", b"3")
    w = kv.watch("k", include_history=True, ignore_deletes=True)
    got = []
    while (e := w.updates(10)) is not None:
        got.append(e.value)
    assert got == [b"1", b"2", b"3"]
    w.stop()
