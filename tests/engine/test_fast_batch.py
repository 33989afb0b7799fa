"""Fast batch reply subjects and flow state (rayjet.engine.fast_batch), without a stream:
the reader against the rules of nats-server's form, and the state machine against flows
nats-server 2.15.1 answers (the wire comparison is tests/gateway/test_gateway_fast_batch.py)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.engine import fast_batch as F
from rayjet.errors import error_for

_TOKEN = st.text(alphabet=st.sampled_from(list("ab09-_$é\udcff*> ")), max_size=5)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=40) | st.lists(_TOKEN, max_size=9).map(".".join).map(
    lambda s: s + ".$FI"), st.none() | st.binary(max_size=80))
def test_any_reply_is_read_or_refused_never_raises(reply, hdr):
    ref, bad = F.parse_reply(reply, hdr)
    assert not (ref is not None and bad)
    if not reply.endswith(".$FI") and not reply.startswith("_R_."):
        assert (ref, bad) == (None, False)
    if ref is not None:
        assert ref.seq >= 1 and 1 <= ref.flow <= 0xFFFF and F.OP_START <= ref.op <= F.OP_PING


@settings(max_examples=500, deadline=None)
@given(st.lists(_TOKEN.filter(lambda t: "." not in t), min_size=1, max_size=3),
       _TOKEN.filter(lambda t: "." not in t),
       st.integers(-5, 70000) | st.just(2 ** 64 + 3), st.sampled_from(["ok", "fail", "x"]),
       st.integers(0, 2 ** 64), st.integers(-1, 6))
def test_well_formed_replies_are_read_by_the_rules(prefix, bid, flow, gap, seq, op):
    reply = ".".join([*prefix, bid, str(flow), gap, str(seq), str(op)]) + ".$FI"
    ref, bad = F.parse_reply(reply)
    valid = (0 <= op <= 4 and 0 < seq < 2 ** 64 - 1 and gap in ("ok", "fail")
             and not (seq == 1 and op == F.OP_EOB) and not (op == F.OP_START and seq != 1)
             and not (op == F.OP_APPEND and seq <= 1))
    if not valid:
        assert (ref, bad) == (None, True)
        return
    wrapped = flow if flow < 2 ** 63 else flow - 2 ** 64
    want_flow = 10 if wrapped <= 0 else min(wrapped, 0xFFFF)
    assert (ref, bad) == (F.FastRef(bid, seq, want_flow, gap == "ok", op), False)


def test_replies_without_a_prefix_or_with_junk_are_refused():
    for reply in ("fb.$FI", "fb.x.$FI", "id.10.ok.1.0.$FI", "fb.id.10.ok.1.+0.$FI",
                  "fb.id.10.ok.١.0.$FI", "fb.id.10.OK.1.0.$FI"):
        assert F.parse_reply(reply) == (None, True), reply
    assert F.parse_reply(".$FI") == (None, False)
    assert F.parse_reply("a.$FIX") == (None, False)
    assert F.parse_reply("p..0.ok.1.0.$FI")[0] == F.FastRef("", 1, 10, True, 0)
    hdr = b'NATS/1.0\r\nNats-Request-Info: {"reply":"p.b.5.fail.1.2.$FI"}\r\n\r\n'
    assert F.parse_reply("_R_.x.y", hdr)[0] == F.FastRef("b", 1, 5, False, F.OP_COMMIT)
    assert F.parse_reply("_R_.x.y", b"NATS/1.0\r\nNats-Request-Info: [1]\r\n\r\n") == (
        None, False)


class _Run:
    """A stream of one replica: each message stored before the next arrives."""

    def __init__(self) -> None:
        self.table = F.FastTable()
        self.seq = 0
        self.inflight = 0

    def send(self, reply: str, outcome=None) -> list:
        ref, bad = F.parse_reply(reply)
        assert ref is not None and not bad
        out: list = []

        def store():
            if outcome is not None:
                return outcome
            self.seq += 1
            return self.seq

        self.table.step(ref, out, store, now=0.0, can_respond=True, per_stream=1000,
                        room=lambda: True)
        return [_text(x) for x in out]


def _text(item) -> object:
    if isinstance(item, bytes):
        return json.loads(item)
    if isinstance(item, F.BatchAck):
        return json.loads(item.render(b'{"stream":"S","seq":', {}))
    if isinstance(item, F.Failed):
        return ("err", item.seq)
    return ("refused", item.error if isinstance(item.error, str) else item.error.err_code)


def fi(bid, seq, op, flow=0, gap="fail"):
    return f"fb.{bid}.{flow}.{gap}.{seq}.{op}.$FI"


def test_flow_acks_every_n_messages_then_the_commit():
    run = _Run()
    got = [run.send(fi("b", 1, 0, 2))] + [run.send(fi("b", s, 1, 2)) for s in (2, 3, 4)]
    got.append(run.send(fi("b", 5, 2, 2)))
    assert got == [[{"type": "ack", "seq": 0, "msgs": 2}], [{"type": "ack", "seq": 2, "msgs": 2}],
                   [], [{"type": "ack", "seq": 4, "msgs": 2}],
                   [{"stream": "S", "seq": 5, "batch": "b", "count": 5}]]
    assert not run.table.open


def test_a_second_batch_starts_at_one_and_ramps_up():
    run = _Run()
    run.send(fi("a", 1, 0, 100))
    first = run.send(fi("b", 1, 0, 100))
    assert first == [{"type": "ack", "seq": 0, "msgs": 1}, {"type": "ack", "seq": 1, "msgs": 2}]
    acks = [run.send(fi("b", s, 1, 100)) for s in range(2, 9)]
    # doubling towards 250 (500 shared by two)
    assert [a for a in acks if a] == [[{"type": "ack", "seq": 3, "msgs": 4}],
                                      [{"type": "ack", "seq": 7, "msgs": 8}]]


def test_a_duplicate_first_message_answers_as_a_duplicate_publish():
    run = _Run()
    assert run.send(fi("d", 1, 2), F.Duplicate(7)) == [
        {"stream": "S", "seq": 7, "duplicate": True, "batch": "d", "count": 1}]
    err = error_for("STREAM_SEALED")
    run.send(fi("e", 1, 0, gap="ok"))
    assert run.send(fi("e", 2, 1, gap="ok"), err) == [("err", 2)]
    # in gap mode ok the refused message still counts
    assert run.send(fi("e", 3, 3, gap="ok")) == [
        {"stream": "S", "seq": 1, "batch": "e", "count": 2}]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("xyz"), st.integers(1, 8), st.integers(0, 4),
                          st.integers(0, 4), st.sampled_from(["ok", "fail"]),
                          st.sampled_from(["stored", "dup", "err"])), max_size=40))
def test_any_order_of_messages_keeps_the_state_sound(msgs):
    run = _Run()
    for bid, seq, op, flow, gap, what in msgs:
        ref, bad = F.parse_reply(fi(bid, seq, op, flow, gap))
        if ref is None:
            continue
        outcome = {"stored": None, "dup": F.Duplicate(1),
                   "err": error_for("STREAM_SEALED")}[what]
        run.send(fi(bid, seq, op, flow, gap), outcome)
        for b in run.table.open.values():
            assert b.fseq <= b.pseq <= b.lseq and 1 <= b.ack_msgs <= 500
