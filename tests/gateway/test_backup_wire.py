"""``$JS.API.STREAM.SNAPSHOT`` / ``RESTORE`` through the gateway, driven as ``nats stream
backup`` / ``restore`` drive nats-server: answers and flow compared with nats-server
2.15.1; a backup taken over the wire restores the same stream and consumers."""

from __future__ import annotations

import asyncio
import json
import re

import nats
import pytest

from benchmarks.natsbase import NatsServer
from rayjet.gateway import backups as B
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401


@pytest.fixture(scope="module")
def nats_server():
    with NatsServer() as server:
        yield server


def _doc(msg) -> dict:
    return json.loads(msg.data)


async def _requests(nc, name: str) -> list:
    """The refusals a backup tool can meet, as (type, error, deliver_subject)."""
    probes = [
        (f"$JS.API.STREAM.SNAPSHOT.{name}", b""),
        (f"$JS.API.STREAM.SNAPSHOT.{name}", b"{}"),
        (f"$JS.API.STREAM.SNAPSHOT.{name}X", b'{"deliver_subject":"x.y"}'),
        (f"$JS.API.STREAM.SNAPSHOT.{name}", b'{"deliver_subject":"x.*"}'),
        (f"$JS.API.STREAM.SNAPSHOT.{name}", b"not json"),
        (f"$JS.API.STREAM.RESTORE.{name}", b"{}"),
        (f"$JS.API.STREAM.RESTORE.{name}", json.dumps({"config": {"name": name}}).encode()),
        (f"$JS.API.STREAM.RESTORE.{name}X", json.dumps({"config": {"name": name}}).encode()),
    ]
    out = []
    for subject, body in probes:
        doc = _doc(await nc.request(subject, body, timeout=10))
        err = doc.get("error") or {}
        desc = err.get("description", "")
        if err.get("err_code") == 10025:
            desc = "invalid JSON"  # the decoder's own words differ
        out.append((doc["type"], err.get("code"), err.get("err_code"), desc,
                    doc.get("deliver_subject", "-")))
    return out


async def _snapshot(nc, name: str, chunk: int = 1024, window: int = 4096,
                    ack: bool = True) -> tuple[dict, list, bytes]:
    """Snapshot ``name`` as the nats CLI does; (answer, [(reply, status)], archive)."""
    inbox = nc.new_inbox()
    frames: list = []
    data = bytearray()
    done = asyncio.get_running_loop().create_future()

    async def take(m):
        status = (m.headers or {}).get("Status")
        frames.append((m.reply, status, len(m.data)))
        data.extend(m.data)
        if m.reply and ack:
            await nc.publish(m.reply, b"")
        if not m.data and not done.done():
            done.set_result(None)

    sub = await nc.subscribe(inbox, cb=take)
    answer = _doc(await nc.request(f"$JS.API.STREAM.SNAPSHOT.{name}", json.dumps(
        {"deliver_subject": inbox, "chunk_size": chunk, "window_size": window}).encode(),
        timeout=10))
    if "error" not in answer:
        await asyncio.wait_for(done, 30)
    await sub.unsubscribe()
    return answer, frames, bytes(data)


async def _restore(nc, name: str, config: dict, archive: bytes, chunk: int = 1024) -> dict:
    answer = _doc(await nc.request(f"$JS.API.STREAM.RESTORE.{name}",
                                   json.dumps({"config": config}).encode(), timeout=10))
    if "error" in answer:
        return answer
    subject = answer["deliver_subject"]
    assert re.fullmatch(rf"\$JS\.SNAPSHOT\.RESTORE\.{name}\.\w+", subject), subject
    for i in range(0, len(archive), chunk):
        ack = await nc.request(subject, archive[i:i + chunk], timeout=10)
        assert ack.data == b""
    return _doc(await nc.request(subject, b"", timeout=60))


def _shape(frames: list) -> list:
    """Full chunks (acked), the partial last one (no reply), the end's status."""
    out = []
    for reply, status, size in frames:
        kind = "end" if not size else ("chunk+ack" if reply else "chunk")
        if not out or out[-1][0] != kind:
            out.append((kind, status))
    return out


async def _fill(nc, name: str) -> None:
    js_ = nc.jetstream()
    await js_.add_stream(name=name, subjects=[f"{name}.>"])
    for i in range(400):
        await js_.publish(f"{name}.{i % 5}", (b"%d-" % i) * 20)
    await js_.delete_msg(name, 7)
    await js_.add_consumer(name, durable_name="C", ack_policy="explicit")
    sub = await js_.pull_subscribe(f"{name}.>", durable="C", stream=name)
    for m in await sub.fetch(30, timeout=5):
        if m.metadata.sequence.stream % 2:
            await m.ack()
    await nc.flush()


def test_backup_and_restore_over_the_wire_as_nats_server(gateway, nats_server,  # noqa: F811
                                                        stream_name,  # noqa: F811
                                                        drop_new_streams):  # noqa: F811
    gw = gateway()

    async def observe(url: str) -> dict:
        nc = await nats.connect(url)
        js_ = nc.jetstream()
        try:
            await _fill(nc, stream_name)
            refusals = await _requests(nc, stream_name)
            before = await js_.stream_info(stream_name)
            consumer = await js_.consumer_info(stream_name, "C")
            answer, frames, archive = await _snapshot(nc, stream_name)
            small = await _snapshot(nc, stream_name, chunk=1 << 20)  # one partial chunk
            config = answer["config"]
            await js_.delete_stream(stream_name)
            created = await _restore(nc, stream_name, config, archive)
            after = await js_.stream_info(stream_name)
            again = await js_.consumer_info(stream_name, "C")
            return {
                "refusals": refusals,
                "answer": (answer["type"], sorted(answer), answer["state"]["messages"]),
                "shape": _shape(frames), "small": _shape(small[1]),
                "acks": [bool(re.fullmatch(
                    rf"\$JS\.SNAPSHOT\.ACK\.{stream_name}\.\w+\.{n}\.{i}", r))
                    for i, (r, _, n) in enumerate([f for f in frames if f[0]], 1)],
                "created": (created["type"], created.get("error"),
                            created["config"]["name"], created.get("did_create")),
                "state": [(s.messages, s.bytes, s.first_seq, s.last_seq, s.num_deleted)
                          for s in (before.state, after.state)],
                "consumer": [(c.delivered.stream_seq, c.ack_floor.stream_seq,
                              c.num_ack_pending, c.num_pending) for c in (consumer, again)],
            }
        finally:
            await nc.close()

    expected = asyncio.run(observe(nats_server.url))
    assert expected["shape"] == [("chunk+ack", None), ("chunk", None), ("end", "204")] or \
        expected["shape"] == [("chunk+ack", None), ("end", "204")]
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}"))
    assert got["refusals"] == expected["refusals"]
    assert got["answer"] == expected["answer"]
    assert got["small"] == expected["small"] == [("chunk", None), ("end", None)]
    assert got["shape"][-1] == ("end", "204") and got["shape"][0] == ("chunk+ack", None)
    assert all(got["acks"]) and all(expected["acks"])
    assert got["created"] == expected["created"]
    assert got["state"][0] == got["state"][1]
    assert got["consumer"][0] == got["consumer"][1]
    assert expected["state"][0] == expected["state"][1]
    assert expected["consumer"][0] == expected["consumer"][1]


def test_a_receiver_that_stops_acking_gets_no_flow_response(gateway, stream_name,  # noqa: F811
                                                           drop_new_streams,  # noqa: F811
                                                           monkeypatch):
    monkeypatch.setattr(B, "ACK_TIMEOUT", 0.5)
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        try:
            await _fill(nc, stream_name)
            _answer, frames, _ = await _snapshot(nc, stream_name, 1024, 4096, ack=False)
            return frames
        finally:
            await nc.close()

    frames = asyncio.run(run())
    # the window (4 chunks) went out, then nothing more until the end
    assert [f[0] is not None for f in frames[:-1]] == [True] * 4
    assert frames[-1][1:] == ("408", 0)


def test_a_damaged_or_abandoned_restore_creates_nothing(gateway, stream_name,  # noqa: F811
                                                       drop_new_streams,  # noqa: F811
                                                       monkeypatch):
    monkeypatch.setattr(B, "RESTORE_IDLE", 0.5)
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        js_ = nc.jetstream()
        try:
            await _fill(nc, stream_name)
            answer, _, archive = await _snapshot(nc, stream_name)
            await js_.delete_stream(stream_name)
            damaged = bytearray(archive)
            damaged[len(damaged) // 2] ^= 4
            bad = await _restore(nc, stream_name, answer["config"], bytes(damaged))
            names = await js_.streams_info()
            # abandoned: a chunk, then nothing
            start = _doc(await nc.request(f"$JS.API.STREAM.RESTORE.{stream_name}",
                                          json.dumps({"config": answer["config"]}).encode()))
            await nc.request(start["deliver_subject"], archive[:1024], timeout=5)
            for _ in range(100):
                if gw.gateway.bridge.backups.restores == 0:
                    break
                await asyncio.sleep(0.05)
            try:  # nobody listens there any more
                await nc.request(start["deliver_subject"], b"", timeout=2)
                late = "answered"
            except nats.errors.NoRespondersError:
                late = "no responders"
            return bad, [s.config.name for s in names], gw.gateway.bridge.backups.restores, late
        finally:
            await nc.close()

    bad, names, running, late = asyncio.run(run())
    assert bad["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    assert bad["error"]["err_code"] == 10062 and bad["error"]["code"] == 500
    assert stream_name not in names
    assert running == 0
    assert late == "no responders"


def test_restores_under_way_are_bounded(gateway, stream_name, monkeypatch):  # noqa: F811
    """A gateway spools a bounded number of restores at once; the next is refused (10062)
    and creates nothing."""
    monkeypatch.setattr(B, "MAX_RESTORES", 0)
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        try:
            return _doc(await nc.request(f"$JS.API.STREAM.RESTORE.{stream_name}", json.dumps(
                {"config": {"name": stream_name}}).encode(), timeout=10))
        finally:
            await nc.close()

    answer = asyncio.run(run())
    assert answer["error"]["err_code"] == 10062 and answer["deliver_subject"] == ""


def test_an_archive_larger_than_its_stream_can_hold_is_refused(gateway, stream_name,  # noqa: F811
                                                              drop_new_streams,  # noqa: F811
                                                              monkeypatch):
    monkeypatch.setattr(B, "SPOOL_SLACK", 0)
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        try:
            start = _doc(await nc.request(f"$JS.API.STREAM.RESTORE.{stream_name}", json.dumps(
                {"config": {"name": stream_name, "max_bytes": 1000}}).encode(), timeout=10))
            first = await nc.request(start["deliver_subject"], b"x" * 2500, timeout=10)
            return _doc(first)
        finally:
            await nc.close()

    answer = asyncio.run(run())
    assert answer["error"]["err_code"] == 10062, answer
    assert "max_bytes" in answer["error"]["description"]
