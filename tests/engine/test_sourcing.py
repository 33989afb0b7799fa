"""Mirror and source ops: prepare on the leader, apply everywhere, positions replicated."""

from __future__ import annotations

from rayjet.api import headers as H
from rayjet.api.stream import StreamSource, SubjectTransformConfig
from rayjet.engine import StreamEngine, decode_op, encode_op
from rayjet.engine import sourcing as SRC
from rayjet.engine.ops import SourceOp
from rayjet.storage import MemStore

from .conftest import refused


def origin_msgs(*items):
    """(seq, subject, data) -> the pump's (seq, subject, hdr, data, ts) tuples."""
    return [(seq, subj, b"", data, 1_000 + seq) for seq, subj, data in items]


def mirror(make, **src):
    h = make(subjects=[], mirror=StreamSource(name="ORIG", **src))
    (origin,) = SRC.origins(h.engine.config)
    return h, origin


def test_mirror_keeps_origin_seqs_and_timestamps_and_skips_gaps(make):
    h, origin = mirror(make)
    op = SRC.prepare_mirror(h.engine, origin, 0, 7, "id1",
                            origin_msgs((2, "o.a", b"x"), (5, "o.b", b"y")))
    res = h.apply(op)
    assert res.ok and res.value == [2, 5]
    assert [(m.seq, m.subject, m.data, m.ts) for m in h.msgs()] == [
        (2, "o.a", b"x", 1002), (5, "o.b", b"y", 1005)]
    st = h.state()
    assert (st.first_seq, st.last_seq, st.msgs) == (2, 5, 2)
    assert h.engine.sources.position(origin.key) == 7
    assert h.engine.sources.ident(origin.key) == "id1"
    # next batch continues after the position; seq 8 follows directly
    h.apply(SRC.prepare_mirror(h.engine, origin, 7, 8, "id1", origin_msgs((8, "o.c", b"z"))))
    assert [m.seq for m in h.msgs()] == [2, 5, 8]


def test_mirror_filter_and_transforms(make):
    h, origin = mirror(make, filter_subject="o.keep.>")
    h.apply(SRC.prepare_mirror(h.engine, origin, 0, 3, "", origin_msgs(
        (1, "o.keep.a", b"1"), (2, "o.drop.a", b"2"), (3, "o.keep.b", b"3"))))
    assert [(m.seq, m.subject) for m in h.msgs()] == [(1, "o.keep.a"), (3, "o.keep.b")]

    h2, origin2 = mirror(make, subject_transforms=(
        SubjectTransformConfig(src="o.*.x", dest="m.$1"),
        SubjectTransformConfig(src="p.>", dest="")))
    assert origin2.read_filter == ">"
    h2.apply(SRC.prepare_mirror(h2.engine, origin2, 0, 3, "", origin_msgs(
        (1, "o.a.x", b"1"), (2, "p.q", b"2"), (3, "o.z", b"3"))))
    assert [(m.seq, m.subject) for m in h2.msgs()] == [(1, "m.a"), (2, "p.q")]


def test_mirror_refuses_publishes(make):
    h, _origin = mirror(make)
    with refused(10003, "mirror"):
        h.engine.prepare_publish("o.a", b"x")


def test_stale_source_op_is_rejected_so_nothing_is_stored_twice(make):
    h, origin = mirror(make)
    op = SRC.prepare_mirror(h.engine, origin, 0, 2, "", origin_msgs((1, "a", b""), (2, "b", b"")))
    assert h.apply(op).ok
    again = h.apply(op)
    assert not again.ok and again.error.err_code == 10063
    assert h.state().msgs == 2


def sourcing(make, sources, **cfg):
    h = make(sources=tuple(sources), **cfg)
    return h, SRC.origins(h.engine.config)


def test_sources_get_new_seqs_and_the_nats_stream_source_header(make):
    h, (a, b) = sourcing(make, [StreamSource(name="A"),
                                StreamSource(name="B", filter_subject="b.keep.>")])
    h.pub("s.own", b"mine")
    op, err = SRC.prepare_sources(h.engine, a, 0, 9, "idA", [
        (4, "a.x", b"NATS/1.0\r\nNats-Msg-Id: m1\r\nNats-Expected-Last-Sequence: 3\r\n\r\n",
         b"1", 5)])
    assert err is None and isinstance(op, SourceOp) and [m.seq for m in op.msgs] == [2]
    assert h.apply(op).ok
    op, err = SRC.prepare_sources(h.engine, b, 0, 3, "idB", origin_msgs(
        (1, "b.keep.1", b"k"), (2, "b.drop", b"d"), (3, "b.keep.2", b"k2")))
    assert h.apply(op).ok
    msgs = h.msgs()
    assert [(m.seq, m.subject, m.data) for m in msgs] == [
        (1, "s.own", b"mine"), (2, "a.x", b"1"), (3, "b.keep.1", b"k"), (4, "b.keep.2", b"k2")]
    hdr = H.decode_headers(msgs[1].hdr)
    assert hdr[H.STREAM_SOURCE] == "A 4 > > a.x idA"
    assert hdr[H.MSG_ID] == "m1" and H.EXPECTED_LAST_SEQ not in hdr
    assert H.decode_headers(msgs[3].hdr)[H.STREAM_SOURCE] == "B 3 b.keep.> > b.keep.2 idB"
    assert SRC.parse_source_header("B 3 b.keep.> > b.keep.2 idB") == ("B", 3, "idB")
    assert h.engine.sources.position(a.key) == 9 and h.engine.sources.position(b.key) == 3


def test_sources_apply_stream_transform_and_source_transforms(make):
    h, (src,) = sourcing(make, [StreamSource(name="W", subject_transforms=(
        SubjectTransformConfig(src="foo.*.>", dest="bar.$1.>"),))],
        subjects=[], subject_transform={"src": "bar.west.>", "dest": "baz.>"})
    op, _ = SRC.prepare_sources(h.engine, src, 0, 2, "", origin_msgs(
        (1, "foo.west.t", b""), (2, "foo.east.t", b"")))
    h.apply(op)
    assert [m.subject for m in h.msgs()] == ["baz.t", "bar.east.t"]
    assert H.decode_headers(h.msgs()[0].hdr)[H.STREAM_SOURCE] == "W 1 foo.*.> bar.$1.> foo.west.t"


def test_source_duplicates_are_skipped_and_refusals_stop_the_batch(make):
    h, (src,) = sourcing(make, [StreamSource(name="A")], max_msg_size=100,
                         duplicate_window=60)
    dup = b"NATS/1.0\r\nNats-Msg-Id: same\r\n\r\n"
    op, err = SRC.prepare_sources(h.engine, src, 0, 10, "", [
        (1, "a", dup, b"", 1), (2, "a", dup, b"", 2), (3, "a", b"", b"x" * 100, 3),
        (4, "a", b"", b"", 4)])
    assert err is not None and err.err_code == 10054  # too big: stops at seq 3
    assert op.upto == 2 and len(op.msgs) == 1
    h.apply(op)
    op2, err2 = SRC.prepare_sources(h.engine, src, 2, 10, "", [(3, "a", b"", b"big" * 40, 3)])
    assert op2 is None and err2 is not None
    assert h.engine.sources.position(src.key) == 2


def test_interleaved_publish_makes_a_stale_source_op_rejected(make):
    h, (src,) = sourcing(make, [StreamSource(name="A")])
    op, _ = SRC.prepare_sources(h.engine, src, 0, 1, "", origin_msgs((1, "a", b"")))
    h.engine.set_leader(2)  # new leadership: the projection is gone, op is stale
    pub = h.engine.prepare_publish("s.x", b"")
    assert h.apply(pub).ok
    res = h.apply(op)
    assert not res.ok and h.engine.sources.position(src.key) == 0


def test_reset_op_restarts_a_recreated_origin(make):
    h, (src,) = sourcing(make, [StreamSource(name="A")])
    h.apply(SRC.prepare_sources(h.engine, src, 0, 5, "old", origin_msgs((5, "a", b"")))[0])
    h.apply(SRC.reset_op(src, 5, "new"))
    assert (h.engine.sources.position(src.key), h.engine.sources.ident(src.key)) == (0, "new")


def test_source_op_codec_and_snapshot_carry_positions(make):
    h, (src,) = sourcing(make, [StreamSource(name="A")])
    op, _ = SRC.prepare_sources(h.engine, src, 0, 3, "i", origin_msgs((3, "a", b"d")))
    assert decode_op(encode_op(op)) == op
    h.apply(op)
    snap = h.engine.snapshot()
    other = StreamEngine(h.engine.config, MemStore(h.store.config), h.clock, rebuild=False)
    other.restore(snap)
    assert other.sources.position(src.key) == 3 and other.sources.ident(src.key) == "i"


def test_index_name_and_identity():
    assert SRC.index_name(StreamSource(name="A")) == "A > >"
    assert SRC.index_name(StreamSource(name="A", filter_subject="a.*")) == "A a.* >"
    two = StreamSource(name="A", subject_transforms=(
        SubjectTransformConfig(src="a.>", dest="b.>"), SubjectTransformConfig(src="c.>")))
    assert SRC.index_name(two) == "A a.>\fc.> b.>\f>"
    assert SRC.identity(1, "g") != SRC.identity(2, "g") and len(SRC.identity(1)) == 8
