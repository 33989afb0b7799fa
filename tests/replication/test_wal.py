import os
import random

import pytest

from rayjet.errors import StoreCorruptionError
from rayjet.raft.messages import ConfState, Entry, HardState
from rayjet.replication.wal import FileLogStorage


def ents(lo, hi, term=1):
    return [Entry(term=term, index=i, data=f"e{i}".encode()) for i in range(lo, hi + 1)]


def test_reopen_restores_entries_and_hard_state(tmp_path):
    log = FileLogStorage(tmp_path)
    log.save(HardState(term=2, vote="a", commit=3), ents(1, 5))
    log.close()
    again = FileLogStorage(tmp_path)
    assert again.initial_state()[0] == HardState(term=2, vote="a", commit=3)
    assert [e.data for e in again.entries(1, 6)] == [f"e{i}".encode() for i in range(1, 6)]
    assert (again.first_index(), again.last_index()) == (1, 5)


def test_conflicting_suffix_is_replaced_after_reopen(tmp_path):
    log = FileLogStorage(tmp_path)
    log.append(ents(1, 5, term=1))
    log.append(ents(3, 4, term=2))  # a new leader overwrote 3.. and dropped 5
    log.close()
    again = FileLogStorage(tmp_path)
    assert [(e.index, e.term) for e in again.entries(1, again.last_index() + 1)] == [
        (1, 1), (2, 1), (3, 2), (4, 2)]


def test_snapshot_and_compaction_survive_reopen(tmp_path):
    log = FileLogStorage(tmp_path, rewrite_bytes=1)  # rewrite the WAL on every compaction
    log.save(HardState(term=1, vote="a", commit=8), ents(1, 10))
    log.create_snapshot(8, ConfState(("a", "b", "c")), b"state@8")
    log.compact(8)
    log.append(ents(11, 12))
    log.close()
    again = FileLogStorage(tmp_path)
    assert again.snapshot().meta.index == 8
    assert again.snapshot().data == b"state@8"
    assert again.initial_state()[1].voters == ("a", "b", "c")
    assert (again.first_index(), again.last_index()) == (9, 12)
    assert again.term(8) == 1


def test_installing_a_leader_snapshot_replaces_the_log(tmp_path):
    from rayjet.raft.messages import Snapshot, SnapshotMeta

    log = FileLogStorage(tmp_path)
    log.append(ents(1, 3))
    log.apply_snapshot(Snapshot(SnapshotMeta(20, 4, ConfState(("x",))), b"big"))
    log.append(ents(21, 22, term=4))
    log.close()
    again = FileLogStorage(tmp_path)
    assert (again.first_index(), again.last_index()) == (21, 22)
    assert again.initial_state()[0].commit == 20


def test_torn_tail_keeps_every_complete_record(tmp_path):
    src = tmp_path / "src"
    log = FileLogStorage(src)
    for i in range(1, 21):
        log.append(ents(i, i))
    log.close()
    raw = (src / "wal.log").read_bytes()
    rng = random.Random(5)
    cuts = sorted({rng.randrange(0, len(raw)) for _ in range(60)} | {len(raw) - 1})
    kept = []
    for cut in cuts:
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / "wal.log").write_bytes(raw[:cut])
        reopened = FileLogStorage(d)
        n = reopened.last_index()
        if n:
            assert [e.data for e in reopened.entries(1, n + 1)] == [
                f"e{i}".encode() for i in range(1, n + 1)]
        reopened.append(ents(n + 1, n + 1, term=2))  # new writes follow the last good record
        reopened.close()
        assert FileLogStorage(d).last_index() == n + 1
        kept.append(n)
    assert kept == sorted(kept)  # a longer file never keeps fewer records
    assert kept[-1] == 19  # cutting the last byte loses only the last record


def test_flipped_bit_is_reported_not_served(tmp_path):
    log = FileLogStorage(tmp_path)
    for i in range(1, 11):
        log.append(ents(i, i))
    log.close()
    path = tmp_path / "wal.log"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreCorruptionError) as info:
        FileLogStorage(tmp_path)
    assert info.value.err_code == 10077


def test_sync_is_needed_only_after_writes(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    log = FileLogStorage(tmp_path)
    log.sync()
    assert calls == []
    log.append(ents(1, 100))
    log.sync()
    log.sync()
    assert len(calls) == 1  # one fsync covers the whole batch
