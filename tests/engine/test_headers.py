"""Nats-Msg-Id dedup, Nats-Expected-*, Nats-Rollup, Nats-TTL: checks made on the leader."""

from __future__ import annotations

from rayjet.api import PubAck
from rayjet.errors import DuplicateInProcessError

from .conftest import refused

ID = "Nats-Msg-Id"


# -- dedup -------------------------------------------------------------------------------------
def test_duplicate_answers_the_original_seq(make):
    h = make()
    assert h.pub("s.a", b"1", {ID: "x"}).seq == 1
    h.pub("s.b", b"2")
    assert h.pub("s.a", b"1", {ID: "x"}) == PubAck(stream="S", seq=1, duplicate=True)
    assert h.state().msgs == 2


def test_duplicate_still_in_flight_is_10158(make):
    h = make()
    h.engine.prepare_publish("s.a", b"1", {ID: "x"})
    with refused(10158):
        h.engine.prepare_publish("s.a", b"1", {ID: "x"})
    assert issubclass(DuplicateInProcessError, Exception)


def test_dedup_window_expires(make, clock):
    h = make(duplicate_window=10.0)
    h.pub("s.a", b"1", {ID: "x"})
    clock.advance(5)
    assert h.pub("s.a", b"1", {ID: "x"}).duplicate
    clock.advance(6)
    assert h.engine.expire().pruned_ids == 1
    assert h.pub("s.a", b"1", {ID: "x"}).seq == 2


def test_entry_past_the_window_is_ignored_before_pruning(make, clock):
    h = make(duplicate_window=1.0)
    h.pub("s.a", b"1", {ID: "x"})
    clock.advance(2)
    assert not h.pub("s.a", b"1", {ID: "x"}).duplicate


# -- expected headers --------------------------------------------------------------------------
def test_expected_stream(make):
    h = make()
    h.pub("s.a", b"", {"Nats-Expected-Stream": "S"})
    with refused(10060):
        h.engine.prepare_publish("s.a", b"", {"Nats-Expected-Stream": "OTHER"})


def test_expected_last_sequence(make):
    h = make()
    h.pub("s.a", b"", {"Nats-Expected-Last-Sequence": "0"})
    h.pub("s.a", b"", {"Nats-Expected-Last-Sequence": "1"})
    with refused(10071, "wrong last sequence: 2"):
        h.engine.prepare_publish("s.a", b"", {"Nats-Expected-Last-Sequence": "1"})


def test_expected_last_sequence_sees_proposals_in_flight(make):
    h = make()
    h.engine.prepare_publish("s.a", b"")  # seq 1, not applied yet
    op = h.engine.prepare_publish("s.a", b"", {"Nats-Expected-Last-Sequence": "1"})
    assert op.seq == 2
    with refused(10071, "wrong last sequence: 2"):
        h.engine.prepare_publish("s.a", b"", {"Nats-Expected-Last-Sequence": "1"})


def test_expected_last_subject_sequence(make):
    h = make()
    h.pub("s.a", b"", {"Nats-Expected-Last-Subject-Sequence": "0"})
    h.pub("s.b")
    h.pub("s.a", b"", {"Nats-Expected-Last-Subject-Sequence": "1"})
    with refused(10071, "wrong last sequence: 3"):
        h.engine.prepare_publish("s.a", b"", {"Nats-Expected-Last-Subject-Sequence": "1"})


def test_expected_last_subject_sequence_pipelined(make):
    h = make()
    a = h.engine.prepare_publish("s.a", b"", {"Nats-Expected-Last-Subject-Sequence": "0"})
    b = h.engine.prepare_publish("s.a", b"", {"Nats-Expected-Last-Subject-Sequence": str(a.seq)})
    with refused(10071):
        h.engine.prepare_publish("s.a", b"", {"Nats-Expected-Last-Subject-Sequence": str(a.seq)})
    assert h.apply(a).ok and h.apply(b).ok


def test_expected_last_subject_sequence_with_subject_override(make):
    h = make()
    h.pub("s.k.1")
    hdr = {"Nats-Expected-Last-Subject-Sequence": "1",
           "Nats-Expected-Last-Subject-Sequence-Subject": "s.k.*"}
    assert h.pub("s.k.2", b"", hdr).seq == 2
    with refused(10071, "wrong last sequence: 2"):
        h.engine.prepare_publish("s.k.3", b"", hdr)
    with refused(10193):
        h.engine.prepare_publish(
            "s.k.3", b"", {"Nats-Expected-Last-Subject-Sequence-Subject": "s.k.*"})


def test_expected_override_filter_with_matching_proposal_in_flight_is_10164(make):
    h = make()
    h.engine.prepare_publish("s.k.1", b"")
    with refused(10164):
        h.engine.prepare_publish("s.k.2", b"", {
            "Nats-Expected-Last-Subject-Sequence": "0",
            "Nats-Expected-Last-Subject-Sequence-Subject": "s.k.*"})


def test_expected_last_msg_id(make):
    h = make()
    h.pub("s.a", b"", {ID: "one"})
    h.pub("s.a", b"", {ID: "two", "Nats-Expected-Last-Msg-Id": "one"})
    with refused(10070, "wrong last msg ID: two"):
        h.engine.prepare_publish("s.a", b"", {ID: "3", "Nats-Expected-Last-Msg-Id": "one"})


def test_non_numeric_expected_sequence_is_ignored(make):
    h = make()
    assert h.pub("s.a", b"", {"Nats-Expected-Last-Sequence": "abc"}).seq == 1


# -- rollup ------------------------------------------------------------------------------------
def test_rollup_needs_allow_rollup(make):
    h = make()
    with refused(10111, "rollup not permitted"):
        h.engine.prepare_publish("s.a", b"", {"Nats-Rollup": "sub"})


def test_rollup_refused_with_deny_purge(make):
    import dataclasses

    from rayjet.engine import UpdateConfigOp

    h = make(allow_rollup_hdrs=True)
    # validation refuses this pair; an op carrying it still must not allow rollups
    cfg = dataclasses.replace(h.engine.config, deny_purge=True)
    assert h.apply(UpdateConfigOp(cfg.to_dict())).ok
    with refused(10111):
        h.engine.prepare_publish("s.a", b"", {"Nats-Rollup": "all"})


def test_rollup_invalid_value(make):
    h = make(allow_rollup_hdrs=True)
    with refused(10111, "invalid"):
        h.engine.prepare_publish("s.a", b"", {"Nats-Rollup": "everything"})


def test_rollup_subject(make):
    h = make(allow_rollup_hdrs=True)
    for i in range(3):
        h.pub("s.a", b"%d" % i)
        h.pub("s.b", b"%d" % i)
    h.pub("s.a", b"snap", {"Nats-Rollup": "sub"})
    assert [(m.subject, m.data) for m in h.msgs()] == [
        ("s.b", b"0"), ("s.b", b"1"), ("s.b", b"2"), ("s.a", b"snap")]


def test_rollup_all(make):
    h = make(allow_rollup_hdrs=True)
    for i in range(3):
        h.pub("s.a", b"%d" % i)
        h.pub("s.b", b"%d" % i)
    ack = h.pub("s.c", b"snap", {"Nats-Rollup": "all"})
    assert h.seqs() == [ack.seq]


# -- per-message TTL ---------------------------------------------------------------------------
def test_ttl_needs_allow_msg_ttl(make):
    h = make()
    with refused(10166):
        h.engine.prepare_publish("s.a", b"", {"Nats-TTL": "10s"})
    with refused(10166):
        h.engine.prepare_publish("s.a", b"", {"Nats-TTL": "bogus"})


def test_ttl_invalid(make):
    h = make(allow_msg_ttl=True)
    for bad in ("bogus", "500ms", "-5"):
        with refused(10165):
            h.engine.prepare_publish("s.a", b"", {"Nats-TTL": bad})


def test_ttl_expires_the_message(make, clock):
    h = make(allow_msg_ttl=True)
    op = h.engine.prepare_publish("s.a", b"", {"Nats-TTL": "5s"})
    assert op.ttl == 5
    h.apply(op)
    h.pub("s.b", b"", {"Nats-TTL": "never"})
    h.pub("s.c", b"", {"Nats-TTL": "30"})
    clock.advance(6)
    assert h.engine.expire().removed == 1
    assert [m.subject for m in h.msgs()] == ["s.b", "s.c"]
    clock.advance(30)
    h.engine.expire()
    assert [m.subject for m in h.msgs()] == ["s.b"]


def test_never_ttl_outlives_max_age(make, clock):
    h = make(allow_msg_ttl=True, max_age=10.0)
    h.pub("s.a", b"", {"Nats-TTL": "never"})
    h.pub("s.b")
    clock.advance(11)
    h.engine.expire()
    assert [m.subject for m in h.msgs()] == ["s.a"]


def test_subject_delete_marker_proposed_by_the_leader(make, clock):
    h = make(allow_msg_ttl=True, max_age=10.0, subject_delete_marker_ttl=60.0)
    h.pub("s.a", b"x")
    clock.advance(11)
    res = h.engine.expire()
    assert res.removed == 1 and h.state().msgs == 0
    (op,) = res.ops
    assert op.subject == "s.a" and op.ttl == 60 and op.seq == 2
    assert h.apply(op).ok
    (marker,) = h.msgs()
    assert b"Nats-Marker-Reason: MaxAge" in marker.hdr
    clock.advance(61)
    h.engine.expire()
    assert h.state().msgs == 0


def test_proposed_markers_carry_nats_server_headers_and_bytes(make, clock):
    """As nats-server 2.15.1: MaxAge reason, TTL, then a subject rollup; two markers on
    six-character subjects weigh 224 bytes."""
    h = make(allow_msg_ttl=True, max_age=1.0, subject_delete_marker_ttl=1.0, subjects=["ab.*"])
    h.pub("ab.cde")
    h.pub("ab.fgh")
    clock.advance(1)
    res = h.engine.expire()
    assert [op.subject for op in res.ops] == ["ab.cde", "ab.fgh"]
    for op in res.ops:
        assert h.apply(op).ok
    assert [m.hdr for m in h.msgs()] == [
        b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1s\r\nNats-Rollup: sub\r\n\r\n"] * 2
    st = h.state()
    assert (st.msgs, st.bytes) == (2, 224)


def test_followers_drop_their_own_markers(make, clock):
    h = make(allow_msg_ttl=True, max_age=10.0, subject_delete_marker_ttl=60.0)
    h.pub("s.a", b"x")
    h.engine.set_follower()
    clock.advance(11)
    assert h.engine.expire().ops == []
    assert h.state().msgs == 0 and h.state().last_seq == 1


def test_ttl_is_raised_to_the_marker_ttl(make):
    h = make(allow_msg_ttl=True, subject_delete_marker_ttl=60.0)
    op = h.engine.prepare_publish("s.a", b"", {"Nats-TTL": "5s"})
    assert op.ttl == 60 and b"Nats-TTL: 60" in op.hdr


def test_stream_source_header_is_not_allowed(make):
    h = make()
    with refused(10227):
        h.engine.prepare_publish("s.a", b"", {"Nats-Stream-Source": "X 1"})
