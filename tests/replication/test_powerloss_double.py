"""The power-loss double itself: what it keeps and what it drops."""

from __future__ import annotations

import os

from tests.replication.powerloss import PowerLossDisk


def write(path, data, *, sync=False):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, data)
    if sync:
        os.fsync(fd)
    os.close(fd)


def sync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def test_unsynced_appends_and_creations_are_dropped(tmp_path, monkeypatch):
    (tmp_path / "old").write_bytes(b"there before")
    disk = PowerLossDisk(tmp_path, monkeypatch)
    write(tmp_path / "log", b"synced", sync=True)
    sync_dir(tmp_path)
    write(tmp_path / "log", b"+unsynced")
    write(tmp_path / "new", b"data", sync=True)  # its name was never made durable
    (tmp_path / "sub").mkdir()
    lost = disk.lose_power()
    assert sorted(os.listdir(tmp_path)) == ["log", "old"]
    assert (tmp_path / "log").read_bytes() == b"synced"
    assert (tmp_path / "old").read_bytes() == b"there before"
    assert lost["log"] == len(b"+unsynced") and "new" in lost
    disk.close()


def test_a_rename_needs_its_directory_synced(tmp_path, monkeypatch):
    (tmp_path / "state").write_bytes(b"v1")
    disk = PowerLossDisk(tmp_path, monkeypatch)
    write(tmp_path / "state.tmp", b"v2", sync=True)
    os.replace(tmp_path / "state.tmp", tmp_path / "state")
    disk.lose_power()
    assert (tmp_path / "state").read_bytes() == b"v1"
    write(tmp_path / "state.tmp", b"v3", sync=True)
    os.replace(tmp_path / "state.tmp", tmp_path / "state")
    sync_dir(tmp_path)
    disk.lose_power()
    assert os.listdir(tmp_path) == ["state"] and (tmp_path / "state").read_bytes() == b"v3"
    disk.close()


def test_in_place_writes_and_truncations_are_undone(tmp_path, monkeypatch):
    (tmp_path / "blk").write_bytes(b"abcdef")
    disk = PowerLossDisk(tmp_path, monkeypatch)
    fd = os.open(tmp_path / "blk", os.O_RDWR)
    os.pwrite(fd, b"XY", 1)
    os.ftruncate(fd, 4)
    os.close(fd)
    disk.lose_power()
    assert (tmp_path / "blk").read_bytes() == b"abcdef"
    disk.close()
