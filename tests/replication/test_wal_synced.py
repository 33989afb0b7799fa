"""A raft log that lost records it had fsynced is damage, not a torn write: ``wal.synced``
says how much of ``wal.log`` was durable, so a cut before that point raises
StoreCorruptionError (the replica then rejoins empty: rayjet.replication.rejoin), while a
tail written after the last fsync may still be torn by a crash and is dropped."""

from __future__ import annotations

import os

import pytest

from rayjet.errors import StoreCorruptionError
from rayjet.raft import ConfState, Entry, HardState
from rayjet.replication import FileLogStorage


def _log_with_entries(path, n=20, synced=True):
    log = FileLogStorage(path)
    log.set_hard_state(HardState(1, "a", 0))
    for i in range(1, n + 1):
        log.append([Entry(1, i, b"x" * 50)])
        if synced:
            log.sync()
    return log


def _abandon(log):
    """As a killed process leaves it: written data stays, nothing more is synced."""
    log._file.flush()


def test_a_cut_before_the_synced_length_is_damage(tmp_path):
    log = _log_with_entries(tmp_path)
    _abandon(log)
    wal = tmp_path / "wal.log"
    size = wal.stat().st_size
    for cut in (size // 2, size - 1, 8, 0):
        with open(wal, "r+b") as f:
            f.truncate(cut)
        with pytest.raises(StoreCorruptionError):
            FileLogStorage(tmp_path)


def test_a_torn_tail_after_the_last_fsync_is_dropped(tmp_path):
    log = _log_with_entries(tmp_path, n=10)
    synced_size = (tmp_path / "wal.log").stat().st_size
    log.append([Entry(1, 11, b"y" * 500)])  # handed to the OS, never fsynced
    _abandon(log)
    with open(tmp_path / "wal.log", "r+b") as f:
        f.truncate(synced_size + 100)  # the crash tore the unsynced record
    reopened = FileLogStorage(tmp_path)
    assert reopened.last_index() == 10


def test_a_rewritten_log_is_judged_by_its_own_mark(tmp_path):
    log = _log_with_entries(tmp_path, n=30)
    log.create_snapshot(25, ConfState(("a",)), b"state")
    log.compact(25)
    log.rewrite()  # a new, smaller wal.log (another inode)
    log.append([Entry(1, 31, b"z")])
    log.sync()
    _abandon(log)
    reopened = FileLogStorage(tmp_path)
    assert (reopened.first_index(), reopened.last_index()) == (26, 31)
    reopened.close()
    wal = tmp_path / "wal.log"
    with open(wal, "r+b") as f:
        f.truncate(wal.stat().st_size - 3)
    with pytest.raises(StoreCorruptionError):
        FileLogStorage(tmp_path)


def test_a_missing_log_beside_its_snapshot_is_damage(tmp_path):
    log = _log_with_entries(tmp_path, n=30)
    log.create_snapshot(25, ConfState(("a",)), b"state")
    log.close()
    os.remove(tmp_path / "wal.log")
    with pytest.raises(StoreCorruptionError, match="missing or empty"):
        FileLogStorage(tmp_path)


def test_a_damaged_or_missing_mark_claims_nothing(tmp_path):
    log = _log_with_entries(tmp_path, n=10)
    _abandon(log)
    mark = tmp_path / "wal.synced"
    raw = bytearray(mark.read_bytes())
    raw[12] ^= 0xFF
    mark.write_bytes(bytes(raw))
    with open(tmp_path / "wal.log", "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)
    assert FileLogStorage(tmp_path).last_index() < 10  # no claim: read as a torn tail
    mark.unlink()
    assert FileLogStorage(tmp_path).last_index() < 10


def test_an_old_log_without_a_mark_opens_as_before(tmp_path):
    log = _log_with_entries(tmp_path, n=10)
    log.close()
    (tmp_path / "wal.synced").unlink()
    reopened = FileLogStorage(tmp_path)
    assert reopened.last_index() == 10
    reopened.append([Entry(1, 11, b"n")])
    reopened.sync()
    assert (tmp_path / "wal.synced").exists()
