"""Object store watch: current infos, one None, then changes."""

from __future__ import annotations

from rayjet import ObjectStoreConfig, StorageType


def test_object_watch(js, stream_name):
    bucket = stream_name.lower()
    obs = js.create_object_store(ObjectStoreConfig(bucket=bucket, storage=StorageType.MEMORY))
    try:
        obs.put("first", b"1" * 10)
        w = obs.watch()
        assert w.updates(10).name == "first"
        assert w.updates(10) is None
        obs.put("second", b"2" * 10)
        assert w.updates(10).name == "second"
        obs.delete("first")
        info = w.updates(10)
        assert info.name == "first" and info.deleted
        w.stop()
    finally:
        js.delete_object_store(bucket)
