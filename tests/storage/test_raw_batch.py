"""store_raw_batch ends exactly where store_raw per item would, in one write; and the seq-only
last_seq_for_subject lookup. Run on MemStore and on every FileStore flavour."""

from __future__ import annotations

import pytest

from rayjet.api.headers import encode_headers
from rayjet.errors import APIError, InvalidSubjectError, StoreLimitError
from rayjet.storage import StreamStore
from rayjet.storage.block import Block
from tests.storage.test_contract import all_msgs, both_ways

NS = 1_000_000_000
T0 = 1_700_000_000 * NS


def items(n, first=1, subjects=("a.1", "a.2", "b.1"), ts0=T0, size=lambda i: 8, hdr=b"",
          ttl=0):
    return [(subjects[i % len(subjects)], hdr, b"d" * size(i) + str(i).encode(), first + i,
             ts0 + i, ttl) for i in range(n)]


def one_by_one(store, batch, discard_new_check=False):
    for item in batch:
        store.store_raw(*item, discard_new_check=discard_new_check)


def outcome(store):
    return store.state(), all_msgs(store)


def compare(make, batches, pre=(), reopen=True, **cfg):
    """Store ``pre`` one by one in two stores, then ``batches`` one by one in the first and
    with store_raw_batch in the second; both must end the same, errors included."""
    seq_store, batch_store = make(**cfg), make(**cfg)
    for s in (seq_store, batch_store):
        one_by_one(s, pre)
    for batch in batches:
        errs = []
        for call in (lambda b: one_by_one(seq_store, b, True),
                     lambda b: batch_store.store_raw_batch(b, True)):
            try:
                call(batch)
                errs.append(None)
            except APIError as err:
                errs.append((type(err), err.err_code, err.description))
        assert errs[0] == errs[1]
        assert outcome(batch_store) == outcome(seq_store)
    return both_ways(make, batch_store) if reopen else batch_store


def test_protocol_members(make):
    s = make()
    assert isinstance(s, StreamStore)
    assert s.marker_handler is None
    assert hasattr(s, "store_raw_batch") and hasattr(s, "last_seq_for_subject")


def test_plain_batches_agree(make):
    s = compare(make, [items(10), items(7, first=15), items(1, first=22)])
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.deleted) == (18, 1, 22, [11, 12, 13, 14])


def test_empty_batch_is_a_no_op(make):
    s = make()
    s.store_raw_batch([])
    s.store_raw_batch(iter(()))
    assert s.state().last_seq == 0


def test_headers_and_ttls_agree(make, clock):
    hdr = encode_headers({"Nats-TTL": "30s", "X": "y"})
    batch = items(6, hdr=hdr, ts0=clock.now_ns()) + items(4, first=7, ts0=clock.now_ns(), ttl=5)
    s = compare(make, [batch], reopen=False, allow_msg_ttl=True)
    clock.advance(6)
    assert s.expire() == 4
    clock.advance(30)
    assert s.expire() == 6


def test_limit_eviction_agrees(make):
    compare(make, [items(12), items(5, first=13)], max_msgs=5)
    compare(make, [items(40, size=lambda i: (i * 37) % 60)], max_bytes=700)
    compare(make, [items(20)], max_msgs_per_subject=2)
    compare(make, [items(9, subjects=("k",)), items(4, first=10, subjects=("k", "j"))],
            max_msgs_per_subject=1, max_msgs=3)


def test_bytes_and_per_subject_limits_agree():
    # a big message that a small one replaces later on its subject pushed older messages out
    # by size in between: one by one, they stay out
    from rayjet.clock import ManualClock
    from rayjet.storage import MemStore, StoreConfig

    cfg = StoreConfig(storage="memory", max_bytes=200, max_msgs_per_subject=1)
    batch = [("a", b"", b"x" * 10, 1, T0, 0), ("b", b"", b"x" * 110, 2, T0, 0),
             ("c", b"", b"x" * 10, 3, T0, 0), ("b", b"", b"", 4, T0, 0)]
    seq_store, batch_store = MemStore(cfg, ManualClock()), MemStore(cfg, ManualClock())
    one_by_one(seq_store, batch)
    batch_store.store_raw_batch(batch)
    assert outcome(batch_store) == outcome(seq_store)
    assert [m.seq for m in all_msgs(batch_store)] == [3, 4]


def test_bytes_and_per_subject_limits_agree_everywhere(make):
    compare(make, [items(30, subjects=("a", "b", "c", "d"), size=lambda i: (i * 53) % 90)],
            max_bytes=400, max_msgs_per_subject=2)


def test_discard_new_refusal_agrees(make):
    s = compare(make, [items(4, first=4), items(2, first=6)], pre=items(3), max_msgs=5,
                discard="new")
    assert s.state().msgs == 5
    compare(make, [items(6, subjects=("k",))], discard="new", max_msgs_per_subject=2,
            discard_new_per_subject=True)
    compare(make, [items(5, size=lambda i: 100 if i == 3 else 1)], max_msg_size=60)


def test_discard_new_refusal_stops_the_batch(make):
    s = make(max_msgs=4, discard="new")
    with pytest.raises(StoreLimitError):
        s.store_raw_batch(items(6), discard_new_check=True)
    assert s.state().last_seq == 4
    # the replica path trusts the leader: no check unless asked
    s.store_raw_batch(items(2, first=5))
    assert s.state().msgs == 6


def test_max_age_and_due_ttls_inside_a_batch_agree(make, clock):
    now = clock.now_ns()
    old = items(5, ts0=now - 100 * NS)
    compare(make, [old + items(5, first=6, ts0=now)], max_age=50)
    hdr = encode_headers({"Nats-TTL": "2s"})
    due = items(3, hdr=hdr, ts0=now - 10 * NS) + items(3, first=4, ts0=now)
    compare(make, [due], allow_msg_ttl=True)
    compare(make, [items(3, ts0=now - 10 * NS, ttl=1) + items(3, first=4, ts0=now)],
            allow_msg_ttl=True)


def test_markers_inside_a_batch_agree(make, clock):
    # without a marker_handler the store writes the marker itself, taking the next seq
    now = clock.now_ns()
    old = [("m", b"", b"old", 1, now - 100 * NS, 0)]
    cfg = dict(max_age=50, allow_msg_ttl=True, subject_delete_marker_ttl=60)
    s = compare(make, [[("x", b"", b"1", 2, now, 0), ("x", b"", b"2", 3, now, 0)]], pre=old,
                **cfg)
    assert [m.subject for m in all_msgs(s)] == ["m"] and s.state().last_seq == 2
    pre = items(2, subjects=("m",), ts0=now)
    compare(make, [items(3, first=3, subjects=("x",), ts0=now - 100 * NS)
                   + items(2, first=6, subjects=("x",), ts0=now)], pre=pre, **cfg)
    # with one, the store only reports markers (a replicated stream proposes them)
    seen = []
    s = make(**cfg)
    s.marker_handler = lambda subject, hdr: seen.append(subject)
    s.store_raw_batch(old)
    s.store_raw_batch(items(3, first=2, subjects=("x",), ts0=now))
    assert seen == ["m"] and s.state().msgs == 3


def test_bad_items_raise_where_store_raw_would(make):
    compare(make, [items(3, first=2)], pre=items(3))  # seq not above last_seq
    compare(make, [items(3) + items(2, first=3)])  # a repeated seq: two stored, then refused
    compare(make, [items(3) + [("bad subject", b"", b"", 4, T0, 0)]])
    s = make()
    with pytest.raises(InvalidSubjectError):
        s.store_raw_batch([("ok", b"", b"", 1, T0, 0), ("a..b", b"", b"", 2, T0, 0)])
    assert s.state().last_seq == 1
    s.store_raw_batch([("n", None, None, 2, T0, 0)])
    assert s.load_msg(2).data == b""


def test_one_write_and_one_fsync_per_batch(make, monkeypatch):
    if not make.is_file:
        pytest.skip("FileStore only")
    s = make(sync_interval="always", block_size=1 << 20)
    writes = []
    real = Block.append
    monkeypatch.setattr(Block, "append", lambda blk, data: (writes.append(1), real(blk, data)))
    syncs = s.sync_count
    s.store_raw_batch(items(100))
    assert len(writes) == 1 and s.sync_count - syncs == 1
    s2 = make(sync_interval="always", block_size=1 << 20, max_msgs=10)
    writes.clear()
    syncs = s2.sync_count
    s2.store_raw_batch(items(50))  # evictions: the delete records go in the same write
    assert len(writes) == 1 and s2.sync_count - syncs == 1
    monkeypatch.undo()
    both_ways(make, s2)


def test_batches_roll_blocks_like_single_writes(make):
    if not make.is_file:
        pytest.skip("FileStore only")
    s = compare(make, [items(200, size=lambda i: 40)], block_size=2048)
    assert len(s._blocks) > 3


def test_a_batch_across_blocks_writes_the_bytes_of_single_writes(make):
    if make.kind != "file":
        pytest.skip("plain FileStore only (compressed frames take another path, encrypted "
                    "ones differ by their nonces)")
    one, batched = make(block_size=2048), make(block_size=2048)
    batch = items(300, size=lambda i: 11 + (i * 7) % 90)
    batch += [("big.one", b"", b"x" * 5000, 301, T0 + 301, 0)] + items(40, first=302)
    one_by_one(one, batch)
    batched.store_raw_batch(batch)
    for s in (one, batched):
        s.flush()
    assert len(one._blocks) > 3 and sorted(one._blocks) == sorted(batched._blocks)
    for no in sorted(one._blocks):
        with open(one._blocks[no].path, "rb") as a, open(batched._blocks[no].path, "rb") as b:
            assert a.read() == b.read(), f"block {no}"
    assert outcome(both_ways(make, batched)) == outcome(one)


def test_last_seq_for_subject(make):
    s = make()
    assert s.last_seq_for_subject("a.1") == 0
    assert s.last_seq_for_subject(">") == 0
    s.store_raw_batch(items(6))
    assert s.last_seq_for_subject("a.1") == 4
    assert s.last_seq_for_subject("a.*") == 5
    assert s.last_seq_for_subject(">") == 6
    assert s.last_seq_for_subject("nope") == 0
    for subject in ("a.1", "a.*", ">", "b.1"):
        assert s.last_seq_for_subject(subject) == s.load_last_msg(subject).seq
    s.remove_msg(6)
    assert s.last_seq_for_subject("b.1") == 3
    assert s.last_seq_for_subject(">") == 5
    with pytest.raises(InvalidSubjectError):
        s.last_seq_for_subject("a..b")
