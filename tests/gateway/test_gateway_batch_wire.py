"""Atomic batch publish through the gateway on the wire as nats-server 2.15.1 answers it:
the same raw publishes (Nats-Batch-Id / -Sequence / -Commit headers) sent with nats.py to
a nats-server started here and to the gateway, answers and stored messages compared."""

from __future__ import annotations

import asyncio
import json
import re

import nats
import pytest

from benchmarks.natsbase import NatsServer
from rayjet.gateway import batching
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401


@pytest.fixture(scope="module")
def nats_server():
    with NatsServer() as server:
        yield server


def _h(bid: str, seq, commit: str | None = None, **more: str) -> dict[str, str]:
    out = {"Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(seq)}
    if commit is not None:
        out["Nats-Batch-Commit"] = commit
    out.update({k.replace("_", "-"): v for k, v in more.items()})
    return out


async def _ask(nc, subject: str, data: bytes, headers: dict | None) -> str:
    msg = await nc.request(subject, data, headers=headers, timeout=5)
    assert not msg.headers, msg.headers
    return msg.data.decode()


async def _stored(nc, stream: str) -> list:
    """Every stored message: subject, header block (as nats.py reads it), payload."""
    out = []
    seq = 1
    while True:
        msg = await nc.request(f"$JS.API.DIRECT.GET.{stream}", b'{"seq":%d}' % seq, timeout=5)
        if msg.headers and msg.headers.get("Status"):
            break
        hdrs = {k: v for k, v in msg.headers.items() if k != "Nats-Time-Stamp"}
        out.append((hdrs, msg.data.decode()))
        seq += 1
    return out


async def _scenario(url: str, name: str) -> tuple[list, list]:
    nc = await nats.connect(url)
    s = name.lower()
    answers: list = []
    try:
        cfg = {"name": name, "subjects": [f"{s}.>"], "allow_atomic": True,
               "allow_direct": True, "storage": "memory"}
        await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(cfg).encode(), timeout=10)
        off = {"name": f"{name}N", "subjects": [f"{s}n.>"], "storage": "memory"}
        await nc.request(f"$JS.API.STREAM.CREATE.{name}N", json.dumps(off).encode(),
                         timeout=10)

        async def ask(subject, data, headers):
            answers.append(await _ask(nc, subject, data, headers))

        await nc.publish(f"{s}.plain", b"p")  # an ordinary publish before the batches
        await ask(f"{s}.a", b"1", _h("b1", 1))
        await ask(f"{s}.b", b"2", _h("b1", 2, X="y"))
        await ask(f"{s}.plain", b"p2", None)  # between a batch's messages
        await ask(f"{s}.c", b"3", _h("b1", 3, "1"))
        await ask(f"{s}n.a", b"1", _h("b2", 1))  # atomic publish disabled
        await ask(f"{s}.a", b"1", _h("b3", 2))  # the batch never began
        await ask(f"{s}.a", b"1", _h("b3", 1001))  # ... and would be too large
        await ask(f"{s}.a", b"1", _h("b4", 1))
        await ask(f"{s}.a", b"1", _h("b4", 3))  # a gap drops the batch
        await ask(f"{s}.a", b"1", _h("b4", 4, "1"))
        await ask(f"{s}.a", b"1", {"Nats-Batch-Id": "b5"})
        await ask(f"{s}.a", b"1", {"Nats-Batch-Id": "b5", "Nats-Batch-Sequence": "x"})
        await ask(f"{s}.a", b"1", _h("x" * 65, 1))
        await ask(f"{s}.a", b"1", _h("b6", 1, "2"))
        await ask(f"{s}.a", b"1", _h("b7", 1))
        await ask(f"{s}.a", b"1", _h("b7", 2, "x"))
        await ask(f"{s}.a", b"1", _h("b7", 3, "1"))  # b7 was dropped by its bad commit
        await ask(f"{s}.a", b"1", _h("b8", 1, "eob"))
        await ask(f"{s}.e", b"e1", _h("b9", 1))
        await ask(f"{s}.e", b"e2", _h("b9", 2))
        await ask(f"{s}.z", b"zz", _h("b9", 3, "eob"))  # ends the batch, is not stored
        await ask(f"{s}.a", b"1", _h("b10", 1, "1"))
        await ask(f"{s}.a", b"1", _h("b11", 1, Nats_Expected_Last_Msg_Id="q"))
        await ask(f"{s}.a", b"1", _h("b11", 2, "1"))
        await ask(f"{s}.a", b"1", _h("b12", 1, Nats_Msg_Id="q"))
        await ask(f"{s}.a", b"1", _h("b12", 2, "1", Nats_Msg_Id="q"))
        await ask(f"{s}.i", b"1", _h("b13", 1, "1", Nats_Msg_Id="q"))
        await ask(f"{s}.a", b"1", _h("b14", 1, "1", Nats_Msg_Id="q"))
        await ask(f"{s}.a", b"1", _h("b15", 1, Nats_Expected_Last_Sequence="1"))
        await ask(f"{s}.a", b"1", _h("b15", 2, "1"))
        await nc.publish(f"{s}.q", b"quiet", headers=_h("b16", 1, "1"))  # no reply asked
        await ask(f"{s}.a", b"1", _h("b17", 1))  # b17 stays open: nothing stored
        stored = await _stored(nc, name)
        for n in (name, f"{name}N"):
            await nc.request(f"$JS.API.STREAM.DELETE.{n}", b"", timeout=10)
        return answers, stored
    finally:
        await nc.close()


def _normal(answers: list, name: str) -> list:
    return [a.replace(name, "S") for a in answers]


def test_atomic_batches_answer_and_store_as_nats_server(gateway, nats_server,  # noqa: F811
                                                        stream_name,  # noqa: F811
                                                        drop_new_streams):  # noqa: F811
    gw = gateway()
    expected = asyncio.run(_scenario(nats_server.url, stream_name))
    got = asyncio.run(_scenario(f"nats://127.0.0.1:{gw.port}", stream_name))
    exp_answers, exp_stored = expected
    assert exp_answers[:2] == ["", ""], expected
    assert json.loads(exp_answers[3]) == {"stream": stream_name, "seq": 5, "batch": "b1",
                                          "count": 3}, expected
    assert _normal(got[0], stream_name) == _normal(exp_answers, stream_name)
    assert got[1] == exp_stored
    # the batch's messages are stored together, after the publish that came between them
    assert [h.get("Nats-Batch-Sequence") for h, _ in exp_stored[:5]] == [None, None, "1", "2",
                                                                         "3"]


def test_an_idle_batch_is_abandoned(gateway, stream_name, drop_new_streams,  # noqa: F811
                                    monkeypatch):
    """No message for BATCH_TIMEOUT (10 s in nats-server, shortened here): the batch is
    gone, its next message answered 'incomplete'."""
    monkeypatch.setattr(batching, "BATCH_TIMEOUT", 0.2)
    gw = gateway()

    async def run() -> list:
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        s = stream_name.lower()
        cfg = {"name": stream_name, "subjects": [f"{s}.>"], "allow_atomic": True}
        await nc.request(f"$JS.API.STREAM.CREATE.{stream_name}", json.dumps(cfg).encode(),
                         timeout=10)
        out = [await _ask(nc, f"{s}.a", b"1", _h("t", 1))]
        batches = gw.gateway.bridge.publisher.batches
        while not batches.expired(stream_name, "t"):  # polls the batch's idle time
            await asyncio.sleep(0.05)
        out.append(await _ask(nc, f"{s}.a", b"2", _h("t", 2, "1")))
        out.append(await _ask(nc, f"{s}.a", b"3", _h("t", 1, "1")))  # a new batch "t"
        await nc.close()
        return out

    got = asyncio.run(run())
    assert got[0] == ""
    assert json.loads(got[1])["error"]["err_code"] == 10176, got
    assert re.fullmatch(r'\{"stream":"\w+","seq":1,"batch":"t","count":1\}', got[2]), got
