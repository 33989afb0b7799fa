"""Reopening a FileStore from its block index files and checkpoint: after a crash it
replays only what was written after the checkpoint, and reports exactly what a full replay
of the blocks reports; damaged or stale index files fall back to decoding."""

from __future__ import annotations

import pathlib
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayjet.clock import NANOS_PER_SECOND, ManualClock
from rayjet.storage import FileStore, MemStore, StoreConfig

from .test_contract import all_msgs

SUBJECTS = ["a", "b.x", "b.y", "c.d.e"]
TTL_HDR = b"NATS/1.0\r\nNats-TTL: 5\r\n\r\n"
NEVER_HDR = b"NATS/1.0\r\nNats-TTL: never\r\n\r\n"


def cfg(**kw) -> StoreConfig:
    kw.setdefault("block_size", 1024)
    return StoreConfig(**kw)


def crash(store: FileStore) -> None:
    """Drop the store as a killed process would: no close, no index written."""
    for blk in store._blocks.values():
        blk.close()
    store._closed = True


def full_replay(directory, tmp_path, config: StoreConfig, clock) -> FileStore:
    """The store in ``directory`` reopened with every block replayed (no index files)."""
    copy = pathlib.Path(tmp_path) / f"replay-{len(list(pathlib.Path(tmp_path).iterdir()))}"
    shutil.copytree(directory, copy)
    for p in copy.glob("*.idx"):
        p.unlink()
    (copy / "checkpoint.dat").unlink(missing_ok=True)
    store = FileStore(str(copy), config, clock=clock)
    assert not store.recovery["checkpoint"]
    return store


def view(store) -> tuple:
    """Everything a reopened store reports."""
    return (store.state(), all_msgs(store), store.subjects_totals(">"),
            sorted(store._ttl_exp.items()), sorted(store._never),
            [store.num_pending(s, f) for s in (0, 7, 40) for f in (">", "b.*", "a")])


def assert_same(a, b, expire: bool = True) -> None:
    assert view(a) == view(b)
    if not expire:
        b.close()
        return
    clock_now = max(a.clock.now_ns(), b.clock.now_ns())
    later = clock_now + 10 * NANOS_PER_SECOND
    assert a.expire(later) == b.expire(later)  # TTLs and max_age behave the same
    assert view(a) == view(b)
    b.close()


def fill(store: FileStore, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        store.store_msg(SUBJECTS[i % len(SUBJECTS)], TTL_HDR if i % 17 == 0 else b"",
                        b"payload-%d" % i + b"x" * (i % 23))


# -- crash reopen of a many-block store -------------------------------------------------------
def test_crash_reopen_replays_only_the_tail(tmp_path, clock):
    s = FileStore(str(tmp_path / "s"), cfg(allow_msg_ttl=True), clock=clock)
    fill(s, 3000)
    for seq in range(5, 2500, 7):
        s.remove_msg(seq)
    s.erase_msg(2600)
    fill(s, 5, 3000)  # a few frames after the last roll
    nblocks = len(s._blocks)
    assert nblocks > 50
    crash(s)
    r = FileStore(str(tmp_path / "s"), cfg(allow_msg_ttl=True), clock=clock)
    assert r.recovery["checkpoint"]
    assert r.recovery["blocks_loaded"] >= nblocks - 1
    assert r.recovery["blocks_replayed"] <= 2
    assert 0 < r.recovery["frames_replayed"] < 50
    full = full_replay(tmp_path / "s", tmp_path, cfg(allow_msg_ttl=True), clock)
    assert full.recovery["blocks_replayed"] == nblocks
    assert_same(r, full)
    # and it keeps working: writes, a second crash, a clean close
    fill(r, 200, 4000)
    r.remove_msg(3001)
    crash(r)
    r2 = FileStore(str(tmp_path / "s"), cfg(allow_msg_ttl=True), clock=clock)
    assert r2.recovery["frames_replayed"] < 50
    assert_same(r2, full_replay(tmp_path / "s", tmp_path, cfg(allow_msg_ttl=True), clock))
    r2.close()
    r3 = FileStore(str(tmp_path / "s"), cfg(allow_msg_ttl=True), clock=clock)
    assert r3.recovery["frames_replayed"] == 0
    r3.close()


def test_full_replay_writes_the_index_for_next_time(tmp_path, clock):
    s = FileStore(str(tmp_path), cfg(), clock=clock)
    fill(s, 1000)
    crash(s)
    for p in tmp_path.glob("*.idx"):
        p.unlink()
    (tmp_path / "checkpoint.dat").unlink()
    r = FileStore(str(tmp_path), cfg(), clock=clock)
    assert not r.recovery["checkpoint"] and r.recovery["frames_replayed"] >= 1000
    n = len(r._blocks)
    crash(r)
    r = FileStore(str(tmp_path), cfg(), clock=clock)
    assert r.recovery["checkpoint"] and r.recovery["blocks_loaded"] == n - 1
    assert r.recovery["blocks_replayed"] == 1  # only the active block, never indexed
    r.close()


@pytest.mark.parametrize("op", ["compact", "purge", "purge_subject", "truncate", "truncate0",
                                "restore", "per_subject_limit"])
def test_crash_after_structural_ops(tmp_path, clock, op):
    s = FileStore(str(tmp_path / "s"), cfg(allow_msg_ttl=True), clock=clock)
    fill(s, 1500)
    if op == "compact":
        s.compact(700)
    elif op == "purge":
        s.purge()
    elif op == "purge_subject":
        s.purge_ex("b.*", keep=3)
    elif op == "truncate":
        s.truncate(900)  # cuts a sealed, indexed block
    elif op == "truncate0":
        s.truncate(0)
    elif op == "restore":
        snap = s.snapshot()
        s.truncate(10)
        s.restore(snap)
    elif op == "per_subject_limit":
        s.update_config(cfg(allow_msg_ttl=True, max_msgs_per_subject=2))
    fill(s, 300, 2000)
    crash(s)
    r = FileStore(str(tmp_path / "s"), cfg(allow_msg_ttl=True), clock=clock)
    assert r.recovery["checkpoint"]
    assert_same(r, full_replay(tmp_path / "s", tmp_path, cfg(allow_msg_ttl=True), clock))


def test_truncate_then_rewrite_same_sizes(tmp_path, clock):
    """A block cut by truncate and written again to its old length is not described by its
    old index file."""
    s = FileStore(str(tmp_path / "s"), cfg(), clock=clock)
    fill(s, 400)
    s.truncate(150)
    clock.advance(1.0)
    fill(s, 250)  # same subjects and lengths, other timestamps
    crash(s)
    r = FileStore(str(tmp_path / "s"), cfg(), clock=clock)
    assert_same(r, full_replay(tmp_path / "s", tmp_path, cfg(), clock))


# -- damaged and stale index files --------------------------------------------------------------
def _damage(path: pathlib.Path, how: str) -> None:
    raw = bytearray(path.read_bytes())
    if how == "flip":
        raw[len(raw) // 2] ^= 0x40
        path.write_bytes(bytes(raw))
    elif how == "truncate":
        path.write_bytes(bytes(raw[:len(raw) // 2]))
    elif how == "delete":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")


@pytest.mark.parametrize("how", ["flip", "truncate", "delete", "empty"])
@pytest.mark.parametrize("target", ["idx", "checkpoint"])
def test_damaged_files_fall_back(tmp_path, clock, how, target):
    s = FileStore(str(tmp_path / "s"), cfg(allow_msg_ttl=True), clock=clock)
    fill(s, 1200)
    s.remove_msg(100)
    crash(s)
    d = tmp_path / "s"
    victim = sorted(d.glob("*.idx"))[3] if target == "idx" else d / "checkpoint.dat"
    _damage(victim, how)
    r = FileStore(str(d), cfg(allow_msg_ttl=True), clock=clock)
    if target == "idx":
        assert r.recovery["checkpoint"] and r.recovery["blocks_replayed"] >= 1
    else:
        assert not r.recovery["checkpoint"]
    assert_same(r, full_replay(d, tmp_path, cfg(allow_msg_ttl=True), clock))


def test_stale_index_files_are_not_trusted(tmp_path, clock):
    d = tmp_path / "s"
    s = FileStore(str(d), cfg(), clock=clock)
    fill(s, 600)
    s.close()
    old = {p.name: p.read_bytes() for p in d.glob("*.idx")}
    old_ckpt = (d / "checkpoint.dat").read_bytes()
    s = FileStore(str(d), cfg(), clock=clock)
    s.truncate(300)
    fill(s, 200, 900)
    s.remove_msg(50)
    crash(s)
    # put back index files and the checkpoint from before the truncate
    for name, raw in old.items():
        (d / name).write_bytes(raw)
    (d / "checkpoint.dat").write_bytes(old_ckpt)
    r = FileStore(str(d), cfg(), clock=clock)
    assert_same(r, full_replay(d, tmp_path, cfg(), clock))


def test_block_longer_than_its_index(tmp_path, clock):
    """The active block indexed at close, then written to after reopening: the index covers
    a prefix and the rest is replayed."""
    d = tmp_path / "s"
    s = FileStore(str(d), cfg(block_size=1 << 16), clock=clock)
    fill(s, 100)
    s.close()
    s = FileStore(str(d), cfg(block_size=1 << 16), clock=clock)
    fill(s, 30, 100)
    s.remove_msg(3)
    crash(s)
    r = FileStore(str(d), cfg(block_size=1 << 16), clock=clock)
    assert r.recovery["checkpoint"] and r.recovery["frames_replayed"] < 40
    assert_same(r, full_replay(d, tmp_path, cfg(block_size=1 << 16), clock))


def test_index_of_another_block_is_not_used(tmp_path, clock):
    d = tmp_path / "s"
    s = FileStore(str(d), cfg(), clock=clock)
    fill(s, 800)
    crash(s)
    idx = sorted(d.glob("*.idx"))
    idx[4].write_bytes(idx[5].read_bytes())
    r = FileStore(str(d), cfg(), clock=clock)
    assert r.recovery["blocks_replayed"] >= 1
    assert_same(r, full_replay(d, tmp_path, cfg(), clock))


# -- encryption ---------------------------------------------------------------------------------
@pytest.mark.parametrize("compression", ["none", "s2"])
def test_encrypted_index_files_hold_no_plaintext(tmp_path, clock, compression):
    d = tmp_path / "s"
    c = cfg(encryption_key=b"k1", compression=compression)
    s = FileStore(str(d), c, clock=clock)
    for i in range(400):
        s.store_msg(f"secret.subject.{i % 3}", b"", b"TOP-SECRET-PAYLOAD-%d" % i)
    s.close()
    files = list(d.glob("*.idx")) + [d / "checkpoint.dat"]
    assert len(files) > 5
    for p in files:
        raw = p.read_bytes()
        assert b"secret" not in raw and b"TOP-SECRET" not in raw
    r = FileStore(str(d), c, clock=clock)
    assert r.recovery["checkpoint"] and r.recovery["frames_replayed"] == 0
    assert r.subjects_totals(">") == {f"secret.subject.{k}": 134 - (k > 0) for k in range(3)}
    assert_same(r, full_replay(d, tmp_path, c, clock))


# -- random operations with crashes ---------------------------------------------------------------
OPS = st.one_of(
    st.tuples(st.just("store"), st.integers(0, 3), st.integers(0, 60), st.integers(0, 5)),
    st.tuples(st.just("batch"), st.integers(1, 40)),
    st.tuples(st.just("remove"), st.integers(0, 400)),
    st.tuples(st.just("erase"), st.integers(0, 400)),
    st.tuples(st.just("purge_ex"), st.sampled_from(["a", "b.*", ">"]), st.integers(0, 3)),
    st.tuples(st.just("compact"), st.integers(0, 400)),
    st.tuples(st.just("truncate"), st.integers(0, 400)),
    st.tuples(st.just("skip"), st.integers(1, 5)),
    st.tuples(st.just("tick"), st.integers(0, 3)),
    st.tuples(st.just("crash")),
    st.tuples(st.just("close")),
)


def _apply(store, op, _clock) -> None:
    kind = op[0]
    last = store.fast_state().last_seq
    if kind == "store":
        hdr = (b"", TTL_HDR, NEVER_HDR, b"NATS/1.0\r\nX: y\r\n\r\n", b"", b"")[op[3]]
        store.store_msg(SUBJECTS[op[1]], hdr, b"d" * op[2])
    elif kind == "batch":
        store.store_batch([(SUBJECTS[i % 4], b"", b"b%d" % i) for i in range(op[1])])
    elif kind == "remove":
        store.remove_msg(op[1] % (last + 1))
    elif kind == "erase":
        store.erase_msg(op[1] % (last + 1))
    elif kind == "purge_ex":
        store.purge_ex(op[1], keep=op[2])
    elif kind == "compact":
        store.compact(op[1] % (last + 2))
    elif kind == "truncate":
        store.truncate(op[1] % (last + 1))
    elif kind == "skip":
        store.skip_msgs(last + 1, op[1])
    elif kind == "tick":
        store.expire()


def _reference(store) -> tuple:
    st_ = store.state()
    return (st_.msgs, st_.bytes, st_.first_seq, st_.last_seq, st_.num_deleted,
            [(m.seq, m.subject, m.hdr, m.data) for m in all_msgs(store)],
            store.subjects_totals(">"))


@settings(max_examples=int(__import__("os").environ.get("RAYJET_STORE_EXAMPLES", "30")),
          deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, max_size=60), max_per=st.sampled_from([-1, 2]),
       block=st.sampled_from([1024, 2048]))
def test_random_ops_with_crashes(tmp_path_factory, ops, max_per, block):
    tmp = tmp_path_factory.mktemp("prop")
    clock = ManualClock()
    kw = {"allow_msg_ttl": True, "max_msgs_per_subject": max_per}
    c = StoreConfig(block_size=block, **kw)
    store = FileStore(str(tmp / "s"), c, clock=clock)
    ref = MemStore(StoreConfig(storage="memory", **kw), clock=clock)
    fill(store, 60)
    fill(ref, 60)
    for op in ops:
        if op[0] in ("crash", "close"):
            if op[0] == "crash":
                crash(store)
            else:
                store.close()
            store = FileStore(str(tmp / "s"), c, clock=clock)
            assert_same(store, full_replay(tmp / "s", tmp, c, clock), expire=False)
            assert _reference(store) == _reference(ref)
            continue
        if op[0] == "tick":
            clock.advance(op[1] * 2.0)
        _apply(store, op, clock)
        _apply(ref, op, clock)
    crash(store)
    store = FileStore(str(tmp / "s"), c, clock=clock)
    assert_same(store, full_replay(tmp / "s", tmp, c, clock), expire=False)
    assert _reference(store) == _reference(ref)
    later = clock.now_ns() + 10 * NANOS_PER_SECOND
    assert store.expire(later) == ref.expire(later)
    assert _reference(store) == _reference(ref)
    store.close()

