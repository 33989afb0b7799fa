"""Publishing: subjects, transforms, sizes, sealed, first_seq, no_ack, leadership."""

from __future__ import annotations

import pytest

from rayjet.api import PubAck, StreamConfig
from rayjet.api.stream import StreamSource, SubjectTransformConfig
from rayjet.engine import MsgOp, StreamEngine, store_config
from rayjet.errors import NotLeaderError
from rayjet.storage import MemStore

from .conftest import refused


def test_publish_stores_with_leader_seq_and_time(make, clock):
    h = make()
    op = h.engine.prepare_publish("s.a", b"one")
    assert isinstance(op, MsgOp) and op.seq == 1 and op.ts == clock.now_ns()
    res = h.apply(op)
    assert res.ok and res.ack == PubAck(stream="S", seq=1)
    m = h.store.load_msg(1)
    assert (m.subject, m.data, m.ts) == ("s.a", b"one", clock.now_ns())


def test_timestamps_never_go_back_within_the_stream(make, clock):
    h = make()
    a = h.engine.prepare_publish("s.a", b"")
    b = h.engine.prepare_publish("s.a", b"")
    assert b.ts >= a.ts and b.seq == a.seq + 1


def test_invalid_publish_subject(make):
    h = make()
    with refused(10003):
        h.engine.prepare_publish("s..a", b"")
    with refused(10003, "last token"):
        h.engine.prepare_publish("s.>.a", b"")


def test_wildcard_tokens_are_stored_as_literal_tokens(make):
    # as nats-server stores a client's publish to 's.*': the client gates it
    h = make()
    for subject in ("s.a", "s.*", "s.>"):
        assert h.apply(h.engine.prepare_publish(subject, subject.encode())).ok
    assert [h.store.load_msg(i).subject for i in (1, 2, 3)] == ["s.a", "s.*", "s.>"]
    # a filter matches them as it matches the subjects they stand for
    assert h.store.load_last_msg("s.*").seq == 2  # 's.>' stands for more than 's.*' matches
    assert h.store.load_last_msg("s.>").seq == 3
    # a rollup of 's.*' (kv.purge("hello.*")) keeps only itself of what 's.*' matches
    h.store.purge_ex("s.*", 0, 1)
    assert [m.subject for m in (h.store.load_msg(2), h.store.load_msg(3))] == ["s.*", "s.>"]
    assert h.store.state().msgs == 2


def test_subject_not_captured_by_the_stream(make):
    h = make()
    with refused(10003, "not captured"):
        h.engine.prepare_publish("other.a", b"")


def test_subject_transform_on_ingest(make):
    h = make(subject_transform=SubjectTransformConfig(src="s.*", dest="t.{{wildcard(1)}}"),
             subjects=["s.>", "t.>"])
    h.pub("s.x", b"1")
    h.pub("s.x.y", b"2")  # does not match the source: stored unchanged
    assert [m.subject for m in h.msgs()] == ["t.x", "s.x.y"]


def test_message_too_big(make):
    h = make(max_msg_size=10)
    h.pub("s.a", b"x" * 10)
    with refused(10054):
        h.engine.prepare_publish("s.a", b"x" * 11)
    with refused(10054):
        h.engine.prepare_publish("s.a", b"x" * 5, {"Nats-Msg-Id": "abcdef"})


def test_header_too_big(make):
    h = make()
    with refused(10097):
        h.engine.prepare_publish("s.a", b"", {"Big": "x" * 70_000})
    with refused(10097):
        h.engine.prepare_publish("s.a", b"", b"NATS/1.0\r\nBig: " + b"x" * 70_000 + b"\r\n\r\n")


def test_raw_header_block_is_accepted(make):
    h = make()
    ack = h.pub("s.a", b"d", b"NATS/1.0\r\nNats-Msg-Id: 1\r\n\r\n")
    assert h.pub("s.a", b"d", {"Nats-Msg-Id": "1"}) == PubAck(stream="S", seq=ack.seq,
                                                              duplicate=True)


def test_sealed_stream_refuses_writes(make):
    h = make(sealed=True)
    with refused(10109):
        h.engine.prepare_publish("s.a", b"")
    with refused(10109):
        h.engine.prepare_purge()
    with refused(10109):
        h.engine.prepare_delete(1)


def test_mirror_refuses_publishes(clock):
    cfg = StreamConfig(name="M", mirror=StreamSource(name="S"), storage="memory")
    e = StreamEngine(cfg, MemStore(store_config(cfg), clock=clock), clock)
    e.set_leader(1)
    with refused(10003, "mirror"):
        e.prepare_publish("s.a", b"")


def test_first_seq(make):
    h = make(first_seq=100)
    assert h.pub("s.a").seq == 100
    assert h.state().first_seq == 100 and h.state().last_seq == 100


def test_no_ack_stream_still_stores(make):
    h = make(no_ack=True)
    assert h.pub("s.a", b"x").seq == 1
    assert h.state().msgs == 1


def test_followers_do_not_prepare(make):
    h = make()
    h.engine.set_follower()
    with pytest.raises(NotLeaderError):
        h.engine.prepare_publish("s.a", b"")


def test_metadata_and_description_travel_in_config(make):
    h = make(description="orders", metadata={"team": "a"})
    assert h.engine.config.description == "orders"
    assert h.engine.config.metadata == {"team": "a"}


def test_republish(make, clock):
    from rayjet.api.headers import decode_headers
    from rayjet.api.stream import RePublish

    h = make(republish=RePublish(src="s.>", dest="rp.>"))
    op = h.engine.prepare_publish("s.a", b"hello", {"X": "1"})
    res = h.apply(op)
    (rp,) = res.republish
    hdrs = decode_headers(rp.hdr)
    assert rp.subject == "rp.a" and rp.data == b"hello"
    assert hdrs["X"] == "1" and hdrs["Nats-Stream"] == "S" and hdrs["Nats-Subject"] == "s.a"
    assert hdrs["Nats-Sequence"] == "1" and hdrs["Nats-Last-Sequence"] == "0"
    assert hdrs["Nats-Time-Stamp"].startswith("2023-11-14T22:13:20")
    h.pub("s.b")
    res = h.apply(h.engine.prepare_publish("s.a", b"again"))
    assert decode_headers(res.republish[0].hdr)["Nats-Last-Sequence"] == "1"


def test_republish_headers_only(make):
    from rayjet.api.headers import decode_headers
    from rayjet.api.stream import RePublish

    h = make(republish=RePublish(src="s.a", dest="rp.a", headers_only=True))
    (rp,) = h.apply(h.engine.prepare_publish("s.a", b"hello")).republish
    assert rp.data == b"" and decode_headers(rp.hdr)["Nats-Msg-Size"] == "5"
    assert h.apply(h.engine.prepare_publish("s.b", b"x")).republish == []


def test_republish_only_on_the_leader(make):
    from rayjet.api.stream import RePublish

    h = make(republish=RePublish(src="s.>", dest="rp.>"))
    op = h.engine.prepare_publish("s.a", b"hello")
    h.engine.set_follower()
    assert h.apply(op).republish == []
