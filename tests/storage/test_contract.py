"""The StreamStore contract, run on MemStore and on every FileStore flavour."""

from __future__ import annotations

import pytest

from rayjet.api.headers import decode_headers, encode_headers
from rayjet.errors import (
    APIError,
    InvalidConfigError,
    MessageTooBigError,
    NotFoundError,
    StoreFailedError,
    StoreLimitError,
)
from rayjet.storage import NEVER, StoredMsg, StreamStore, record_size


def fill(store, n, subjects=("foo",), data=b"x"):
    return [store.store_msg(subjects[i % len(subjects)], b"", data + str(i).encode())[0]
            for i in range(n)]


def both_ways(make, store, clean=None):
    """The store after a clean reopen and after a crash reopen agree with it."""
    before = store.state()
    msgs = all_msgs(store)
    if not make.is_file:
        return store
    for c in ([clean] if clean is not None else [False, True]):
        store = make.reopen(store, clean=c)
        assert store.state() == before
        assert all_msgs(store) == msgs
    return store


def all_msgs(store) -> list[StoredMsg]:
    out, seq = [], 0
    while True:
        try:
            m, seq = store.load_next_msg(">", True, seq)
        except NotFoundError:
            return out
        out.append(m)
        seq += 1


# -- basics -----------------------------------------------------------------------------------
def test_store_and_load(make, clock):
    s = make()
    assert isinstance(s, StreamStore)
    assert s.state().first_seq == 0 and s.state().last_seq == 0
    seq, ts = s.store_msg("o", b"", b"hello")
    assert (seq, ts) == (1, clock.now_ns())
    assert s.state().bytes == 36  # nats-server's figure for 'hello' on subject 'o'
    clock.advance(1)
    hdr = encode_headers({"Nats-Msg-Id": "1"})
    seq2, ts2 = s.store_msg("abcd", hdr, b"hello")
    assert seq2 == 2 and ts2 == ts + 1_000_000_000
    m = s.load_msg(2)
    assert m == StoredMsg("abcd", hdr, b"hello", 2, ts2)
    assert decode_headers(m.hdr) == {"Nats-Msg-Id": "1"}
    st = s.state()
    assert st.bytes == 36 + 39 + 4 + len(hdr)
    assert (st.msgs, st.first_seq, st.last_seq, st.first_ts, st.last_ts) == (2, 1, 2, ts, ts2)
    assert st.num_subjects == 2
    both_ways(make, s)


def test_record_size_formula():
    assert record_size(1, 0, 5) == 36
    assert record_size(4, 0, 5) == 39
    assert record_size(16, 0, 7) == 53  # seed 001: 'order 4' on ORDERS.processed
    assert record_size(4, 10, 5) == 39 + 4 + 10


def test_missing_seq_is_not_found(make):
    s = make()
    fill(s, 3)
    for seq in (0, 4, 100):
        with pytest.raises(NotFoundError) as e:
            s.load_msg(seq)
        assert e.value.err_code == 10037
    s.remove_msg(2)
    with pytest.raises(NotFoundError):
        s.load_msg(2)


def test_store_raw_replica_path(make):
    s = make()
    s.store_raw("a", b"", b"1", 1, 111)
    s.store_raw("a", b"", b"2", 2, 222)
    with pytest.raises(APIError):
        s.store_raw("a", b"", b"x", 2, 333)
    s.store_raw("b", b"", b"5", 5, 555)  # a gap: 3 and 4 are deleted seqs
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.last_ts, st.deleted) == (3, 1, 5, 555, [3, 4])
    assert s.load_msg(5).ts == 555
    both_ways(make, s)


def test_skip(make):
    s = make()
    assert s.skip_msg() == 1
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 2, 1)
    s.skip_msgs(2, 10)
    assert (s.state().first_seq, s.state().last_seq) == (12, 11)
    assert s.store_msg("a", b"", b"")[0] == 12
    s.skip_msgs(13, 3)
    assert s.state().deleted == [13, 14, 15]
    with pytest.raises(APIError):
        s.skip_msg(99)
    assert s.store_msg("a", b"", b"")[0] == 16
    both_ways(make, s)


# -- queries ----------------------------------------------------------------------------------
def test_load_next_prev_last(make):
    s = make()
    for subj in ["a.1", "b.1", "a.2", "b.2", "a.1", "c"]:
        s.store_msg(subj, b"", subj.encode())
    assert s.load_next_msg("a.*", True, 0)[1] == 1
    assert s.load_next_msg("a.*", True, 2)[1] == 3
    assert s.load_next_msg("b.2", False, 1)[1] == 4
    assert s.load_next_msg(">", True, 6)[1] == 6
    assert s.load_next_msg("", True, 0)[1] == 1
    with pytest.raises(NotFoundError):
        s.load_next_msg("a.*", True, 6)
    with pytest.raises(NotFoundError):
        s.load_next_msg("zzz", False, 0)
    assert s.load_prev_msg(4, "a.*")[1] == 3
    assert s.load_prev_msg(6, ">")[1] == 6
    assert s.load_prev_msg(2, "b.>")[1] == 2
    with pytest.raises(NotFoundError):
        s.load_prev_msg(1, "b.>")
    assert s.load_last_msg("a.1").seq == 5
    assert s.load_last_msg("b.*").seq == 4
    assert s.load_last_msg(">").seq == 6
    with pytest.raises(NotFoundError):
        s.load_last_msg("nope")
    s.remove_msg(6)
    assert s.load_last_msg(">").seq == 5
    assert s.load_last_msg().subject == "a.1"


def test_subjects_totals_and_num_pending(make):
    s = make()
    for subj in ["a.1", "b.1", "a.2", "b.2", "a.1", "c"]:
        s.store_msg(subj, b"", b"")
    assert s.subjects_totals("a.*") == {"a.1": 2, "a.2": 1}
    assert s.subjects_totals(">") == {"a.1": 2, "a.2": 1, "b.1": 1, "b.2": 1, "c": 1}
    assert s.num_pending(0, ">") == (6, 6)
    assert s.num_pending(3, ">") == (4, 6)
    assert s.num_pending(2, "a.*") == (2, 6)
    assert s.num_pending(1, "a.*", last_per_subject=True) == (2, 6)
    assert s.num_pending(4, "a.>", last_per_subject=True) == (1, 6)
    s.remove_msg(3)
    assert s.num_pending(2, ">") == (4, 6)
    assert s.num_pending(7, ">") == (0, 6)


# -- deletes ----------------------------------------------------------------------------------
def test_remove_and_erase(make):
    s = make()
    fill(s, 5)
    assert s.remove_msg(3)
    assert not s.remove_msg(3)
    assert not s.remove_msg(99)
    assert s.erase_msg(4)
    assert not s.erase_msg(4)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted, st.deleted) == (3, 1, 5, 2, [3, 4])
    s.remove_msg(1)
    assert s.state().first_seq == 2
    s.remove_msg(2)
    assert s.state().first_seq == 5 and s.state().deleted == []
    s.remove_msg(5)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.bytes) == (0, 6, 5, 0)
    both_ways(make, s)


def test_erase_overwrites_bytes_on_disk(make):
    if make.kind != "file":
        pytest.skip("plain FileStore only: the payload is visible on disk")
    s = make()
    s.store_msg("a", b"", b"SECRET-PAYLOAD")
    s.store_msg("a", b"", b"other")
    s.erase_msg(1)
    s.close()
    import pathlib
    raw = b"".join(p.read_bytes() for p in pathlib.Path(s.directory).glob("*.blk"))
    assert b"SECRET-PAYLOAD" not in raw


def test_purge(make):
    s = make()
    fill(s, 10)
    assert s.purge() == 10
    st = s.state()
    assert (st.msgs, st.bytes, st.first_seq, st.last_seq) == (0, 0, 11, 10)
    assert s.store_msg("a", b"", b"")[0] == 11
    both_ways(make, s)


def test_purge_ex(make):
    s = make()
    for i in range(10):
        s.store_msg("a" if i % 2 else "b", b"", b"%d" % i)
    # a: 2,4,6,8,10  b: 1,3,5,7,9
    assert s.purge_ex("a", keep=2) == 3
    assert s.subjects_totals("a") == {"a": 2}
    assert s.purge_ex("b", seq=6) == 3  # up to but not including 6
    assert [m.seq for m in all_msgs(s)] == [7, 8, 9, 10]
    assert s.purge_ex("a", seq=1) == 0
    assert s.purge_ex("", seq=9) == 2  # no subject + seq = compact
    assert s.state().first_seq == 9
    assert s.purge_ex(">", keep=1) == 1
    assert [m.seq for m in all_msgs(s)] == [10]
    both_ways(make, s)


def test_compact(make):
    s = make()
    fill(s, 10)
    s.remove_msg(6)
    assert s.compact(5) == 4
    st = s.state()
    assert (st.msgs, st.first_seq, st.deleted) == (5, 5, [6])
    assert s.compact(3) == 0
    assert s.compact(7) == 1
    assert s.state().first_seq == 7
    assert s.compact(20) == 4
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 20, 19)
    assert s.store_msg("a", b"", b"")[0] == 20
    both_ways(make, s)


def test_truncate(make, clock):
    s = make()
    seqs = []
    for _ in range(10):
        seqs.append(s.store_msg("a", b"", b"m"))
        clock.advance(1)
    s.remove_msg(3)
    s.remove_msg(8)
    s.truncate(6)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.last_ts, st.deleted) == (5, 1, 6, seqs[5][1], [3])
    assert s.store_msg("b", b"", b"new")[0] == 7
    assert s.load_msg(7).data == b"new"
    s = both_ways(make, s)
    s.truncate(0)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 0, 0)
    assert s.store_msg("c", b"", b"")[0] == 1
    both_ways(make, s)


def test_truncate_after_removing_tail(make):
    s = make()
    fill(s, 6)
    s.remove_msg(5)
    s.remove_msg(2)
    s.truncate(5)
    st = s.state()
    assert (st.msgs, st.last_seq, st.deleted) == (3, 5, [2, 5])
    both_ways(make, s)


# -- limits -----------------------------------------------------------------------------------
def test_max_msgs_discard_old(make):
    s = make(max_msgs=3)
    fill(s, 5)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (3, 3, 5)
    both_ways(make, s)


def test_max_msgs_discard_new(make):
    s = make(max_msgs=3, discard="new")
    fill(s, 3)
    with pytest.raises(StoreLimitError) as e:
        s.store_msg("foo", b"", b"x")
    assert e.value.err_code == 10077
    assert e.value.description == "maximum messages exceeded"
    assert s.state().msgs == 3
    s.store_raw("foo", b"", b"replica", 4, 1)  # replicas apply what the leader accepted
    assert s.state().msgs == 4


def test_max_bytes(make):
    size = record_size(3, 0, 2)
    s = make(max_bytes=3 * size)
    fill(s, 5, data=b"y")
    assert (s.state().msgs, s.state().bytes) == (3, 3 * size)
    n = make(max_bytes=3 * size, discard="new")
    fill(n, 3, data=b"y")
    with pytest.raises(StoreLimitError) as e:
        n.store_msg("foo", b"", b"y9")
    assert e.value.description == "maximum bytes exceeded"


def test_max_msgs_per_subject(make):
    s = make(max_msgs_per_subject=2)
    for i in range(5):
        s.store_msg("a", b"", b"%d" % i)
        s.store_msg("b", b"", b"%d" % i)
    assert s.subjects_totals() == {"a": 2, "b": 2}
    assert [m.data for m in all_msgs(s)] == [b"3", b"3", b"4", b"4"]
    both_ways(make, s)


def test_discard_new_per_subject(make):
    s = make(max_msgs_per_subject=1, discard="new", discard_new_per_subject=True)
    s.store_msg("a", b"", b"1")
    with pytest.raises(StoreLimitError) as e:
        s.store_msg("a", b"", b"2")
    assert e.value.description == "maximum messages per subject exceeded"
    s.store_msg("b", b"", b"1")
    # without discard_new_per_subject, discard new still replaces at the subject limit
    t = make(max_msgs=1, max_msgs_per_subject=1, discard="new")
    t.store_msg("a", b"", b"1")
    t.store_msg("a", b"", b"2")
    assert [m.data for m in all_msgs(t)] == [b"2"]


def test_max_msg_size(make):
    s = make(max_msg_size=10)
    s.store_msg("a", b"", b"0123456789")
    with pytest.raises(MessageTooBigError) as e:
        s.store_msg("a", b"", b"0123456789x")
    assert e.value.err_code == 10054


def test_max_age(make, clock):
    s = make(max_age=10)
    s.store_msg("a", b"", b"1")
    clock.advance(5)
    s.store_msg("b", b"", b"2")
    clock.advance(5)
    assert s.expire() == 1
    assert [m.data for m in all_msgs(s)] == [b"2"]
    clock.advance(4.9)
    assert s.expire() == 0
    clock.advance(0.1)
    s.store_msg("c", b"", b"3")  # writes expire first
    assert [m.data for m in all_msgs(s)] == [b"3"]
    both_ways(make, s)


def test_per_message_ttl(make, clock):
    s = make(allow_msg_ttl=True, max_age=100)
    s.store_msg("a", b"", b"short", ttl=2)
    s.store_msg("b", encode_headers({"Nats-TTL": "5s"}), b"hdr")
    s.store_msg("c", encode_headers({"Nats-TTL": "never"}), b"forever")
    s.store_msg("d", b"", b"plain")
    clock.advance(2)
    assert s.expire() == 1
    s = both_ways(make, s)
    clock.advance(3)
    assert s.expire() == 1
    clock.advance(100)
    s.expire()
    assert [m.data for m in all_msgs(s)] == [b"forever"]
    assert s.state().first_seq == 3


def test_ttl_ignored_without_allow_msg_ttl(make, clock):
    s = make()
    s.store_msg("a", b"", b"x", ttl=1)
    clock.advance(10)
    s.expire()
    assert s.state().msgs == 1


def test_subject_delete_marker(make, clock):
    s = make(max_age=10, allow_msg_ttl=True, subject_delete_marker_ttl=60)
    s.store_msg("k.a", b"", b"1")
    s.store_msg("k.b", b"", b"1")
    clock.advance(1)
    s.store_msg("k.b", b"", b"2")
    clock.advance(9)
    s.expire()
    # k.a lost its last message: a marker takes its place; k.b still has one
    marker = s.load_last_msg("k.a")
    assert marker.seq == 4 and marker.data == b""
    assert decode_headers(marker.hdr) == {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "1m0s",
                                          "Nats-Rollup": "sub"}
    assert s.load_last_msg("k.b").data == b"2"
    s = both_ways(make, s)
    clock.advance(1)
    s.expire()
    assert s.load_last_msg("k.b").hdr  # k.b's last message aged out: marker
    clock.advance(60)
    s.expire()
    assert s.state().msgs == 0  # markers expire by their own TTL and leave nothing


def test_subject_delete_markers_match_nats_server_bytes(make, clock):
    """nats-server 2.15.1 (file store), max_age 1s and marker TTL 1s: two six-character
    subjects lose their last message and the stream holds two markers, 224 bytes."""
    s = make(max_age=1, allow_msg_ttl=True, subject_delete_marker_ttl=1)
    s.store_msg("ab.cde", b"", b"")
    s.store_msg("ab.fgh", b"", b"")
    assert s.state().bytes == 72
    clock.advance(1)
    s.expire()
    st = s.state()
    assert (st.msgs, st.bytes, st.first_seq, st.last_seq) == (2, 224, 3, 4)
    want = b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1s\r\nNats-Rollup: sub\r\n\r\n"
    assert [(m.subject, m.hdr, m.data) for m in (s.load_msg(3), s.load_msg(4))] == [
        ("ab.cde", want, b""), ("ab.fgh", want, b"")]


def test_update_config_enforces(make):
    s = make()
    fill(s, 10, subjects=("a", "b"))
    s.update_config(make.config(max_msgs_per_subject=2))
    assert s.subjects_totals() == {"a": 2, "b": 2}
    s.update_config(make.config(max_msgs=3))
    assert s.state().msgs == 3
    with pytest.raises(InvalidConfigError):
        s.update_config(make.config().__class__(storage="memory" if make.is_file else "file"))


def test_batch(make):
    s = make(max_msgs=5)
    out = s.store_batch([("a", b"", b"%d" % i) for i in range(8)])
    assert [seq for seq, _ in out] == list(range(1, 9))
    assert [m.seq for m in all_msgs(s)] == [4, 5, 6, 7, 8]
    n = make(max_msgs=3, discard="new")
    with pytest.raises(StoreLimitError):
        n.store_batch([("a", b"", b"%d" % i) for i in range(5)])
    assert n.state().msgs == 3


def test_snapshot_restore_across_stores(make, tmp_path, clock):
    from rayjet.storage import FileStore, MemStore, StoreConfig

    s = make(allow_msg_ttl=True)
    fill(s, 6, subjects=("a", "b.c"))
    s.store_msg("h", encode_headers({"X": "1"}), b"with headers")
    s.remove_msg(2)
    s.skip_msgs(8, 2)
    snap = s.snapshot()
    targets = [MemStore(StoreConfig(storage="memory"), clock=clock),
               FileStore(str(tmp_path / "restored"), StoreConfig(block_size=2048), clock=clock)]
    for t in targets:
        t.store_msg("junk", b"", b"to be replaced")
        t.restore(snap)
        assert t.state() == s.state()
        assert all_msgs(t) == all_msgs(s)
        t.close()
    f = FileStore(str(tmp_path / "restored"), StoreConfig(block_size=2048), clock=clock)
    assert f.state() == s.state()
    f.close()


def test_invalid_subject_and_closed(make):
    s = make()
    with pytest.raises(APIError):
        s.store_msg("a..b", b"", b"")
    with pytest.raises(APIError):
        s.store_msg("a.>.b", b"", b"")
    # '*' and '>' tokens are stored as literal tokens (as nats-server stores them)
    assert s.store_msg("a.*", b"", b"")[0] == 1
    assert s.load_msg(1).subject == "a.*"
    s.close()
    with pytest.raises(StoreFailedError):
        s.store_msg("a", b"", b"")


def test_never_constant():
    assert NEVER == -1
