"""``$JS.API.CONSUMER.RESET.<stream>.<consumer>`` through the gateway as nats-server 2.15.1
answers it (the same raw requests to both, answers compared without times), and through
the Python API, across a change of the consumer's leader."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest
from nats.errors import TimeoutError as NatsTimeout

from benchmarks.natsbase import NatsServer
from rayjet.errors import APIError
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401

_TIMES = ("created", "ts", "cluster")


@pytest.fixture(scope="module")
def nats_server():
    with NatsServer() as server:
        yield server


def _seen(doc: dict) -> dict:
    """A reset answer without its times; the config only as far as the test set it."""
    out = {k: v for k, v in doc.items() if k not in _TIMES}
    if "config" in out:
        cfg = out["config"]
        out["config"] = {k: cfg.get(k) for k in ("name", "deliver_policy", "metadata")}
    return out


def test_reset_answers_as_nats_server(gateway, nats_server, stream_name,  # noqa: F811
                                      drop_new_streams):  # noqa: F811
    gw = gateway()
    reset = f"$JS.API.CONSUMER.RESET.{stream_name}."

    async def observe(url: str) -> list:
        nc = await nats.connect(url)
        js_ = nc.jetstream()

        async def ask(subject: str, body: bytes = b"", headers=None) -> dict:
            reply = await nc.request(subject, body, timeout=20, headers=headers)
            return _seen(json.loads(reply.data))

        try:
            await js_.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            for i in range(5):
                await js_.publish(f"{stream_name}.a", f"m{i}".encode())
            await js_.add_consumer(stream_name, durable_name="C", ack_policy="explicit")
            sub = await js_.pull_subscribe_bind("C", stream_name)
            first = await sub.fetch(3, timeout=5)
            await first[0].ack_sync()
            out: list = [await ask(reset + "C")]  # back to just past the ack floor
            again = await sub.fetch(2, timeout=5)
            out.append([(m.data.decode(), m.metadata.sequence.consumer,
                         m.metadata.num_delivered) for m in again])
            for body in (b'{"seq":4}', b'{"seq":"x"}', b'{"seq":-1}', b'{"seq":0}',
                         b'{"seq":100}', b'{}'):
                out.append(await ask(reset + "C", body))
            out.append(await ask(reset + "C", b"", {"Nats-Required-Api-Level": "6"}))
            await js_.add_consumer(stream_name, durable_name="L", ack_policy="explicit",
                                   deliver_policy="last")
            out.append(await ask(reset + "L", b'{"seq":2}'))
            out.append(await ask(reset + "L"))
            await js_.add_consumer(stream_name, durable_name="S", ack_policy="explicit",
                                   deliver_policy="by_start_sequence", opt_start_seq=3)
            out.append(await ask(reset + "S", b'{"seq":2}'))
            out.append(await ask(reset + "S", b'{"seq":4}'))
            for subject in (reset + "NOPE", f"$JS.API.CONSUMER.RESET.{stream_name}X.C"):
                with pytest.raises(NatsTimeout):  # nobody listens there: no answer at all
                    await nc.request(subject, b"", timeout=1.0)
            await js_.delete_stream(stream_name)
            return out
        finally:
            await nc.close()

    expected = asyncio.run(observe(nats_server.url))
    assert expected[0]["reset_seq"] == 2 and expected[0]["delivered"] == {
        "consumer_seq": 0, "stream_seq": 1}, expected[0]
    assert expected[1] == [("m1", 1, 1), ("m2", 2, 1)], expected[1]
    assert expected[3]["error"]["err_code"] == 10025, expected[3]
    assert expected[9]["error"]["err_code"] == 10204, expected[9]
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}"))
    assert got == expected


def test_a_reset_survives_a_change_of_leader(js, stream_name, drop_new_streams):  # noqa: F811
    """The Python API's reset is a replicated change: the next leader delivers from it."""
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3)
    for i in range(6):
        js.publish(f"{stream_name}.a", f"m{i}".encode())
    js.add_consumer(stream_name, durable_name="C", ack_policy="explicit", num_replicas=3)
    sub = js.pull_subscribe(stream=stream_name, durable="C")
    assert [m.data for m in sub.fetch(6, timeout=10)] == [f"m{i}".encode() for i in range(6)]
    info, seq = js.reset_consumer(stream_name, "C", 3)
    assert seq == 3
    assert (info.delivered.consumer_seq, info.delivered.stream_seq, info.ack_floor.stream_seq,
            info.num_ack_pending, info.num_pending) == (0, 2, 2, 0, 4)
    before = js.consumer_leader_stepdown(stream_name, "C")
    assert before is not None
    deadline = time.monotonic() + 30
    while True:  # the new leader answers once it leads
        try:
            info = js.consumer_info(stream_name, "C")
            break
        except Exception:  # noqa: BLE001 - electing
            assert time.monotonic() < deadline
    assert (info.delivered.consumer_seq, info.delivered.stream_seq, info.num_pending) == (0, 2, 4)
    msgs = sub.fetch(2, timeout=10)
    assert [(m.data, m.metadata.sequence.consumer) for m in msgs] == [(b"m2", 1), (b"m3", 2)]
    js.add_consumer(stream_name, durable_name="N", deliver_policy="new")
    with pytest.raises(APIError, match="invalid reset: not allowed") as err:
        js.reset_consumer(stream_name, "N", 2)
    assert err.value.err_code == 10204


def test_a_reset_forward_lets_an_interest_stream_drop_what_it_skipped(
        js, stream_name, drop_new_streams):  # noqa: F811
    """As nats-server: messages below the reset seq lose the consumer's interest (its only
    one here), so the stream removes them."""
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], retention="interest")
    js.add_consumer(stream_name, durable_name="C", ack_policy="explicit")
    for _ in range(5):
        js.publish(f"{stream_name}.a", b"x")
    assert js.reset_consumer(stream_name, "C", 4).reset_seq == 4
    deadline = time.monotonic() + 20
    while (state := js.stream_info(stream_name).state).messages != 2:
        assert time.monotonic() < deadline, state
        time.sleep(0.05)
    assert state.first_seq == 4
