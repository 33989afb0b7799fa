"""headers_only, ack sampling, replay original, rate limit, delivery metadata."""

from __future__ import annotations

from rayjet.api import headers as H
from rayjet.engine.consumer.types import ACK_METRIC_TYPE, parse_ack_reply
from rayjet.engine.consumer.util import go_duration, parse_sample_freq


def test_headers_only(make):
    c = make(headers_only=True)
    c.pub(data=b"hello world", hdr=H.encode_headers({"Trace": "abc"}))
    c.pub(data=b"")
    m1, m2 = c.fetch(2)
    assert m1.data == b"" and H.decode_headers(m1.hdr) == {"Trace": "abc", "Nats-Msg-Size": "11"}
    assert H.decode_headers(m2.hdr) == {"Nats-Msg-Size": "0"}


def test_metadata_and_reply_subject(make, clock):
    c = make()
    for _ in range(3):
        c.pub()
    m = c.fetch()[0]
    ts = c.store.load_msg(1).ts
    assert m.reply == f"$JS.ACK.ORDERS.DISPATCH.1.1.1.{ts}.2"
    info = parse_ack_reply(m.reply)
    assert (info.stream, info.consumer, info.num_delivered, info.stream_seq, info.consumer_seq,
            info.timestamp, info.num_pending) == ("ORDERS", "DISPATCH", 1, 1, 1, ts, 2)
    assert parse_ack_reply("$JS.ACK.dom.hash.ORDERS.D.2.5.7.99.0.rand").stream_seq == 5
    assert parse_ack_reply("foo.bar") is None
    assert parse_ack_reply("$JS.ACK.S.C.x.1.1.1.1") is None


def test_sample_freq_is_deterministic(make):
    def sampled(seed: int) -> list[int]:
        c = make(sample_freq="30%", seed=seed)
        for _ in range(200):
            c.pub()
        for m in c.fetch(200):
            c.ack(m.stream_seq)
        return [a.body["stream_seq"] for a in c.advisories if a.body["type"] == ACK_METRIC_TYPE]

    a = sampled(7)
    assert a == sampled(7)
    assert 30 < len(a) < 90
    c = make(sample_freq="100")
    c.pub()
    c.fetch()
    c.clock.advance(2)
    c.ack(1)
    [adv] = c.advisories
    assert adv.subject == "$JS.EVENT.METRIC.CONSUMER.ACK.ORDERS.DISPATCH"
    assert adv.body["ack_time"] == 2_000_000_000 and adv.body["deliveries"] == 1
    assert parse_sample_freq("") == 0 and parse_sample_freq(" 80% ") == 80


def test_replay_original_spacing(make, clock):
    c = make(start=False)
    for _ in range(3):
        c.pub()
        clock.advance(10)
    d = make(store=c.store, deliver_subject="out.original", replay_policy="original",
             ack_policy="none")
    msgs = d.fetch(3)
    now = d.now
    assert [m.due_ns for m in msgs] == [0, now + 10 * 10**9, now + 20 * 10**9]
    d.pub()  # published after the consumer started: no replay spacing
    assert [m.due_ns for m in d.fetch()] == [0]


def test_rate_limit_paces_deliveries(make):
    c = make(deliver_subject="out.x", rate_limit_bps=8000, ack_policy="none")  # 1000 bytes/s
    for _ in range(3):
        c.pub(data=b"a" * 400)
    msgs = c.fetch(3)
    assert msgs[0].due_ns == 0
    gap = (msgs[2].due_ns - msgs[1].due_ns) / 1e9
    assert abs(gap - msgs[1].size / 1000) < 1e-6


def test_go_duration():
    assert go_duration(2) == "2s" and go_duration(0.25) == "250ms"
    assert go_duration(90) == "1m30s" and go_duration(3600) == "1h0m0s"


def test_pause_until_reported(make, clock):
    from datetime import UTC, datetime

    until = datetime.fromtimestamp(clock.now_ns() / 1e9 + 60, tz=UTC)
    c = make(pause_until=until)
    i = c.engine.info(c.now)
    assert i.paused and 59 < i.pause_remaining <= 60
