"""Range reads as Arrow columns answer exactly what reading the messages one at a time
does, on every store kind, and damage is reported the same way."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayjet.errors import StoreCorruptionError
from rayjet.storage import columns
from tests.storage.conftest import Factory
from tests.storage.test_filestore import blocks, open_store

SUBJECTS = ["a", "b.c", "b.d", "orders.eu.1", "x"]
FILTERS = [">", "a", "b.*", "orders.>", "nope"]

message = st.tuples(st.sampled_from(SUBJECTS),
                    st.one_of(st.just(b""), st.binary(min_size=12, max_size=40)),
                    st.binary(max_size=300))


def one_at_a_time(store, start: int, end: int, filter_: str, limit: int) -> list[tuple]:
    out, seq = [], start
    while len(out) < limit:
        try:
            m, seq = store.load_next_msg(filter_, True, seq)
        except Exception:  # noqa: BLE001 - NotFound: no more
            break
        if seq > end:
            break
        out.append((m.seq, m.ts, m.subject, m.hdr, m.data))
        seq += 1
    return out


def rows(batch) -> list[tuple]:
    d = batch.to_pydict()
    return list(zip(d["seq"], d["ts"], d["subject"], d["hdr"], d["data"], strict=True))


@pytest.mark.parametrize("kind", ["mem", "file", "file-s2", "file-enc"])
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msgs=st.lists(message, min_size=1, max_size=60),
       deletes=st.lists(st.integers(1, 60), max_size=10),
       start=st.integers(0, 70), span=st.integers(0, 70),
       filter_=st.sampled_from(FILTERS), limit=st.integers(1, 80))
def test_columns_match_single_reads(tmp_path_factory, kind, msgs, deletes, start, span,
                                    filter_, limit):
    from rayjet.clock import ManualClock

    make = Factory(kind, tmp_path_factory.mktemp("cols"), ManualClock())
    store = make()
    try:
        for subject, hdr, data in msgs:
            hdr = b"NATS/1.0\r\nK: " + hdr.hex().encode() + b"\r\n\r\n" if hdr else b""
            store.store_msg(subject, hdr, data)
            make.clock.advance(1_000)
        for seq in deletes:
            if seq <= len(msgs):
                store.remove_msg(seq)
        end = start + span
        batch, nxt = store.read_columns(start, end, filter_, max_msgs=limit,
                                        max_bytes=1 << 30)
        assert batch.schema == columns.SCHEMA
        want = one_at_a_time(store, start, end, filter_, limit)
        assert rows(batch) == want
        if want and nxt:  # going on from ``next`` finds exactly the rest
            rest, _ = store.read_columns(nxt, end, filter_, max_msgs=1000, max_bytes=1 << 30)
            assert rows(rest) == one_at_a_time(store, nxt, end, filter_, 1000)
        if len(want) < limit:
            assert nxt == 0 or not one_at_a_time(store, nxt, end, filter_, 1)
    finally:
        store.close()


def test_a_page_stops_at_max_bytes_with_one_message_at_least(tmp_path, clock):
    s = open_store(tmp_path, clock, block_size=1 << 16)
    for i in range(100):
        s.store_msg("a", b"", b"%03d" % i + b"x" * 97)
    batch, nxt = s.read_columns(1, 1000, ">", max_msgs=1000, max_bytes=10 * 131)
    assert batch.num_rows == 10 and nxt == 11
    batch, nxt = s.read_columns(1, 1000, ">", max_msgs=1000, max_bytes=1)
    assert batch.num_rows == 1 and nxt == 2
    batch, nxt = s.read_columns(95, 1000, ">", max_msgs=1000, max_bytes=1 << 20)
    assert batch.column("seq").to_pylist() == [95, 96, 97, 98, 99, 100] and nxt == 0
    s.close()


def test_records_across_blocks_and_gaps_decode_in_bulk(tmp_path, clock, monkeypatch):
    s = open_store(tmp_path, clock, block_size=1024)
    for i in range(200):
        s.store_msg(f"s.{i % 3}", b"NATS/1.0\r\nI: %d\r\n\r\n" % i if i % 2 else b"", b"p%d" % i)
    for seq in range(5, 200, 7):
        s.remove_msg(seq)
    assert len(blocks(tmp_path)) > 5
    want = one_at_a_time(s, 1, 200, ">", 1000)

    def single_read(seq):
        raise AssertionError("a plain page must not fall back to single reads")

    monkeypatch.setattr(s, "_read", single_read)
    batch, nxt = s.read_columns(1, 200, ">", max_msgs=1000, max_bytes=1 << 30)
    assert rows(batch) == want and nxt == 0
    batch, _ = s.read_columns(1, 200, "s.1", max_msgs=1000, max_bytes=1 << 30)
    assert rows(batch) == [r for r in want if r[2] == "s.1"]
    s.close()


def test_a_damaged_record_in_a_page_is_reported_as_a_single_read_reports_it(tmp_path, clock):
    s = open_store(tmp_path, clock)
    for i in range(10):
        s.store_msg("a", b"", b"payload-%d" % i)
    with open(blocks(tmp_path)[0], "r+b") as f:
        f.seek(39 * 3 + 30)  # inside the payload of seq 4
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x04]))
    with pytest.raises(StoreCorruptionError):
        s.read_columns(1, 10)
    assert 4 in s.state().lost
    batch, _ = s.read_columns(5, 10)  # the rest still reads, in bulk
    assert batch.column("data").to_pylist() == [b"payload-%d" % i for i in range(4, 10)]
    s.close()


@pytest.mark.parametrize("filter_", ["rare", "many.*", ">"])
def test_sparse_matches_far_apart_are_found_past_the_first_window(tmp_path, clock, filter_):
    """A filter's matches thousands of seqs apart (and a wildcard over dozens of subjects)
    come back in order, as single reads find them, with more than a thousand records
    decoded in one page; pending counts agree after deletes leave gaps."""
    s = open_store(tmp_path, clock)
    for i in range(30_000):
        subject = "rare" if i % 7_001 == 3 else f"many.{i % 40}"
        s.store_msg(subject, b"", b"%d" % i)
    for seq in range(2, 30_000, 13):
        s.remove_msg(seq)
    for start, limit in ((1, 3), (1, 2_000), (20_000, 5), (29_990, 50)):
        batch, _ = s.read_columns(start, 30_000, filter_, max_msgs=limit, max_bytes=1 << 30)
        assert rows(batch) == one_at_a_time(s, start, 30_000, filter_, limit)
    for start in (1, 5_000, 29_999):
        want = len(one_at_a_time(s, start, 30_000, filter_, 30_000))
        assert s.num_pending(start, filter_)[0] == want
    s.close()
