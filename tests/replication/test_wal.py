import os
import random

import pytest

from rayjet.clock import ManualClock
from rayjet.errors import EncryptionKeyError, StoreCorruptionError
from rayjet.raft.messages import ConfState, Entry, HardState
from rayjet.replication.wal import FileLogStorage
from rayjet.storage.crypto import RecordCipher


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
    assert len(calls) == 1  # a new log fsyncs its directory once: its name is durable
    calls.clear()
    log.sync()
    assert calls == []
    log.append(ents(1, 100))
    log.sync()
    log.sync()
    assert len(calls) == 1  # one fsync covers the whole batch


def counting_fsync(monkeypatch):
    """The fsyncs of wal.log (wal.synced, its claim, is fsynced now and then as well)."""
    calls = []
    real = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("wal.log"):
            calls.append(fd)
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_flush_syncs_the_first_write_after_the_interval(tmp_path, monkeypatch):
    clock = ManualClock()
    log = FileLogStorage(tmp_path, sync_interval=10, clock=clock)
    calls = counting_fsync(monkeypatch)
    log.append(ents(1, 1))
    log.flush()
    clock.advance(9.9)
    log.append(ents(2, 2))
    log.flush()
    assert calls == []
    clock.advance(0.1)
    log.append(ents(3, 3))
    log.flush()  # the interval has passed: this write and everything before it
    assert len(calls) == 1 and log.sync_count == 1
    log.append(ents(4, 4))
    log.flush()
    assert len(calls) == 1  # the interval starts again at the last fsync


def test_maybe_sync_covers_an_idle_log(tmp_path, monkeypatch):
    clock = ManualClock()
    log = FileLogStorage(tmp_path, sync_interval=10, clock=clock)
    calls = counting_fsync(monkeypatch)
    log.maybe_sync()
    clock.advance(20)
    log.maybe_sync()
    assert calls == []  # nothing written: nothing to sync
    log.append(ents(1, 1))
    log.flush()  # the interval passed before this write: synced at once
    log.append(ents(2, 2))
    log.flush()
    assert len(calls) == 1
    clock.advance(10)
    log.maybe_sync()  # no write came: the timer syncs it
    assert len(calls) == 2


@pytest.mark.parametrize("interval", ["always", 0])
def test_always_syncs_every_flush(tmp_path, monkeypatch, interval):
    log = FileLogStorage(tmp_path, sync_interval=interval, clock=ManualClock())
    calls = counting_fsync(monkeypatch)
    for i in range(1, 4):
        log.append(ents(i, i))
        log.flush()
    assert len(calls) == 3


SECRET = b"top-secret-payload"


def cipher(key=b"k1"):
    return RecordCipher(key, "chacha20-poly1305")


def secret_log(path, c):
    log = FileLogStorage(path, cipher=c)
    log.save(HardState(term=1, vote="a", commit=3),
             [Entry(term=1, index=i, data=SECRET + b"%d" % i) for i in range(1, 6)])
    log.create_snapshot(3, ConfState(("a",)), SECRET + b"-snapshot")
    log.compact(2)
    log.close()


def test_an_encrypted_log_holds_no_plaintext_and_reopens(tmp_path):
    secret_log(tmp_path, cipher())
    for f in tmp_path.iterdir():
        assert SECRET not in f.read_bytes(), f
    again = FileLogStorage(tmp_path, cipher=cipher())
    assert [e.data for e in again.entries(4, 6)] == [SECRET + b"%d" % i for i in range(4, 6)]
    assert again.snapshot().data == SECRET + b"-snapshot"
    assert again.initial_state()[0] == HardState(term=1, vote="a", commit=3)


@pytest.mark.parametrize("other", [None, b"k2"])
def test_an_encrypted_log_needs_its_key(tmp_path, other):
    secret_log(tmp_path, cipher())
    with pytest.raises(EncryptionKeyError):
        FileLogStorage(tmp_path, cipher=cipher(other) if other else None)
    (tmp_path / "snapshot.bin").unlink()  # the WAL alone refuses too
    with pytest.raises(EncryptionKeyError):
        FileLogStorage(tmp_path, cipher=cipher(other) if other else None)


def test_an_encrypted_torn_tail_is_dropped_not_a_key_error(tmp_path):
    log = FileLogStorage(tmp_path / "src", cipher=cipher())
    for i in range(1, 11):
        log.append(ents(i, i))
    log.close()
    raw = (tmp_path / "src" / "wal.log").read_bytes()
    for cut in range(len(raw) - 40, len(raw)):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / "wal.log").write_bytes(raw[:cut])
        assert FileLogStorage(d, cipher=cipher()).last_index() == 9


def test_a_plain_log_opened_with_a_key_is_sealed(tmp_path):
    secret_log(tmp_path, None)
    assert SECRET in (tmp_path / "wal.log").read_bytes()
    again = FileLogStorage(tmp_path, cipher=cipher())
    for f in tmp_path.iterdir():
        assert SECRET not in f.read_bytes(), f
    again.close()
    reopened = FileLogStorage(tmp_path, cipher=cipher())
    assert [e.data for e in reopened.entries(4, 6)] == [SECRET + b"%d" % i for i in range(4, 6)]
    assert reopened.snapshot().data == SECRET + b"-snapshot"


def test_rewrite_drops_compacted_entries_from_the_file(tmp_path):
    log = FileLogStorage(tmp_path)
    log.append([Entry(term=1, index=i, data=SECRET + b"%d" % i) for i in range(1, 6)])
    log.create_snapshot(4, ConfState(("a",)), b"state")
    log.compact(4)
    log.flush()
    assert SECRET + b"1" in (tmp_path / "wal.log").read_bytes()  # compaction alone keeps it
    log.rewrite()
    raw = (tmp_path / "wal.log").read_bytes()
    assert SECRET + b"1" not in raw and SECRET + b"5" in raw
    log.close()
    assert [e.data for e in FileLogStorage(tmp_path).entries(5, 6)] == [SECRET + b"5"]


def _record_starts(raw):
    pos, starts = 0, []
    while pos + 8 <= len(raw):
        starts.append(pos)
        pos += 8 + (int.from_bytes(raw[pos:pos + 4], "little") & 0x7FFFFFFF)
    return starts


@pytest.mark.parametrize("key", [None, b"k1"])
@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_a_flipped_sealed_bit_is_damage_not_a_key_question(tmp_path, key, which):
    """The sealed bit of a record's length lies outside its checksum: flipped, the record
    disagrees with the rest of its log (a log is sealed whole or not at all)."""
    c = cipher(key) if key else None
    log = FileLogStorage(tmp_path, cipher=c)
    for i in range(1, 6):
        log.append(ents(i, i))
        log.sync()
    log.close()
    wal = tmp_path / "wal.log"
    raw = bytearray(wal.read_bytes())
    starts = _record_starts(bytes(raw))
    assert len(starts) >= 3
    pos = {"first": starts[0], "middle": starts[len(starts) // 2], "last": starts[-1]}[which]
    raw[pos + 3] ^= 0x80  # the top bit of the little-endian length
    wal.write_bytes(bytes(raw))
    with pytest.raises(StoreCorruptionError, match="sealed|plain"):
        FileLogStorage(tmp_path, cipher=cipher(key) if key else None)


def test_reopening_makes_what_a_dead_process_left_durable(tmp_path, monkeypatch):
    """A killed process leaves its writes in the page cache; reopened, they count as
    durable (a snapshot may compact over them), so opening fsyncs them and its claim."""
    log = FileLogStorage(tmp_path)
    log.append(ents(1, 3))
    log._file.flush()  # written, never fsynced: what a killed process leaves
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(
        f"/proc/self/fd/{fd}")), real(fd))[1])
    again = FileLogStorage(tmp_path)
    assert again.last_index() == 3
    names = {os.path.basename(p) for p in synced}
    assert {"wal.log", "wal.synced"} <= names
    assert again._synced.claimed(tmp_path / "wal.log") == (tmp_path / "wal.log").stat().st_size


def test_a_flipped_sealed_bit_on_a_log_of_one_record_is_damage(tmp_path):
    log = FileLogStorage(tmp_path)
    log.set_hard_state(HardState(term=2, vote="a", commit=0))
    log.sync()
    log.close()
    wal = tmp_path / "wal.log"
    raw = bytearray(wal.read_bytes())
    assert len(_record_starts(bytes(raw))) == 1
    raw[3] ^= 0x80
    wal.write_bytes(bytes(raw))
    with pytest.raises(StoreCorruptionError, match="plain record"):
        FileLogStorage(tmp_path)
