"""Restore ops: a backup's messages land at their own sequences, through the log."""

from __future__ import annotations

import pytest

from rayjet.engine import decode_op, encode_op
from rayjet.engine.restore import prepare_restore

from .conftest import refused


def _cols(msgs, base_ts=1_000):
    """(seq, subject, data[, hdr]) -> backup columns."""
    return {"seq": [m[0] for m in msgs], "ts": [base_ts + m[0] for m in msgs],
            "subject": [m[1] for m in msgs], "hdr": [m[3] if len(m) > 3 else b"" for m in msgs],
            "data": [m[2] for m in msgs]}


def _original(make, store_kind="memory", **kw):
    """A stream with a purged start, a deleted middle and a deleted end."""
    h = make(store_kind=store_kind, **kw)
    for i in range(1, 11):
        h.pub(f"s.{i % 3}", f"m{i}".encode())
    h.engine.apply(h.engine.prepare_purge(seq=4))  # 1..3 purged
    h.apply(h.engine.prepare_delete(6))
    h.apply(h.engine.prepare_delete(10))
    return h


@pytest.mark.parametrize("store_kind", ["memory", "file"])
def test_restore_reproduces_sequences_gaps_and_state(make, tmp_path, store_kind):
    orig = _original(make)
    msgs = [(m.seq, m.subject, m.data) for m in orig.msgs()]
    st = orig.state()
    h = make(store_kind=store_kind, directory=str(tmp_path))
    op1 = prepare_restore(h.engine, 0, _cols(msgs[:2]), first=st.first_seq)
    assert decode_op(encode_op(op1)) == op1
    res = h.apply(op1)
    assert res.ok and res.value == 2
    op2 = prepare_restore(h.engine, h.engine.last_seq, _cols(msgs[2:]), first=st.first_seq,
                          last=st.last_seq)
    assert h.apply(op2).ok
    assert [(m.seq, m.subject, m.data, m.ts) for m in h.msgs()] == [
        (s, subj, d, 1_000 + s) for s, subj, d in msgs]
    got = h.state()
    assert (got.first_seq, got.last_seq, got.msgs, got.num_deleted, sorted(got.deleted)) == (
        st.first_seq, st.last_seq, st.msgs, st.num_deleted, sorted(st.deleted))
    # the stream goes on after the restored last sequence
    assert h.pub("s.x", b"next").seq == st.last_seq + 1


def test_an_empty_purged_stream_keeps_its_first_sequence(make):
    h = make()
    h.apply(prepare_restore(h.engine, 0, _cols([]), first=8, last=7))
    st = h.state()
    assert (st.msgs, st.last_seq) == (0, 7)
    assert h.pub("s.a").seq == 8


def test_a_write_during_the_restore_fails_the_next_op(make):
    h = make()
    h.apply(prepare_restore(h.engine, 0, _cols([(1, "s.a", b"x")])))
    stale = prepare_restore(h.engine, 1, _cols([(2, "s.a", b"y")]))
    h.pub("s.b", b"someone else")  # seq 2, proposed after the restore op was made
    res = h.apply(stale)
    assert not res.ok and res.error.err_code == 10062
    with refused(10062, "someone else wrote"):
        prepare_restore(h.engine, 1, _cols([(3, "s.a", b"y")]))


def test_dedup_ids_and_ttls_come_back(make, clock):
    from rayjet.api.headers import encode_headers

    h = make(allow_msg_ttl=True, duplicate_window=3600 * 10**9)
    hdr = encode_headers({"Nats-Msg-Id": "one", "Nats-TTL": "60s"})
    h.apply(prepare_restore(h.engine, 0, _cols([(1, "s.a", b"x", hdr)], clock.now_ns()),
                            last=1))
    ack = h.pub("s.a", b"again", {"Nats-Msg-Id": "one"})
    assert ack.duplicate and ack.seq == 1
    assert h.engine.store.next_expiry_ns() is not None


def test_sources_positions_are_restored(make):
    h = make()
    h.apply(prepare_restore(h.engine, 0, _cols([]), last=0,
                            sources=[["ORIG > >", 42, "abc"]]))
    assert h.engine.sources.position("ORIG > >") == 42
