"""Fast batch publish (allow_batched) through the gateway on the wire as nats-server 2.15.1
answers it: the same raw publishes, each with a ``<prefix>.<id>.<flow>.<gap>.<seq>.<op>.$FI``
reply subject, sent with nats.py to a nats-server started here and to the gateway; the
answers on the reply subjects (flow acks, gaps, errors, PubAcks) and the stored messages
compared."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from benchmarks.natsbase import NatsServer
from rayjet.gateway import fast_batch
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401

START, APPEND, COMMIT, EOB, PING = range(5)


@pytest.fixture(scope="module")
def nats_server():
    with NatsServer() as server:
        yield server


def fi(bid: str, seq: int, op: int, flow: int = 0, gap: str = "fail") -> str:
    return f"fb.{bid}.{flow}.{gap}.{seq}.{op}.$FI"


def batch(bid: str, subject: str, n: int, *, flow: int = 0, gap: str = "fail",
          last: int = COMMIT) -> list[tuple]:
    """Messages 1..n of a batch, the last one with op ``last`` (None: no commit)."""
    out = []
    for seq in range(1, n + 1):
        op = START if seq == 1 else APPEND
        if seq == n and last is not None:
            op = last
        out.append((subject, fi(bid, seq, op, flow, gap), f"{bid}-{seq}".encode(), None))
    return out


class _Replies:
    """Everything answered on ``fb.>``; each step ends with a marker publish (a reply the
    stream cannot read: one answer, after the step's own)."""

    def __init__(self, nc, subject: str) -> None:
        self.nc = nc
        self.subject = subject
        self.got: list[tuple[str, str]] = []
        self.marks = 0
        self._seen = asyncio.Event()

    async def start(self) -> None:
        async def take(msg):
            self.got.append((msg.subject, msg.data.decode()))
            if msg.subject.startswith("fb.mark"):
                self._seen.set()
        await self.nc.subscribe("fb.>", cb=take)

    async def step(self, pubs: list[tuple]) -> list[tuple[str, str]]:
        for subject, reply, data, headers in pubs:
            await self.nc.publish(subject, data, reply=reply, headers=headers)
        self.marks += 1
        self._seen.clear()
        before = len(self.got)
        # to the stream of the step's messages (nats-server takes each stream's in order)
        mark = pubs[0][0].rsplit(".", 1)[0] + ".mark" if pubs else self.subject
        await self.nc.publish(mark, b"m", reply=f"fb.mark{self.marks}.$FI")
        await asyncio.wait_for(self._seen.wait(), 10)
        out = self.got[before:]
        assert out[-1][0] == f"fb.mark{self.marks}.$FI", out
        del self.got[:]
        return out[:-1]


async def _stored(nc, stream: str) -> list:
    out = []
    seq = 1
    while True:
        msg = await nc.request(f"$JS.API.DIRECT.GET.{stream}", b'{"seq":%d}' % seq, timeout=5)
        if msg.headers and msg.headers.get("Status"):
            break
        hdrs = {k: v for k, v in (msg.headers or {}).items() if k != "Nats-Time-Stamp"}
        out.append((msg.headers.get("Nats-Subject"), hdrs, msg.data.decode()))
        seq += 1
    return out


async def _scenario(url: str, name: str) -> tuple[list, list]:
    nc = await nats.connect(url)
    s = name.lower()
    try:
        cfg = {"name": name, "subjects": [f"{s}.>"], "allow_batched": True,
               "allow_direct": True, "storage": "memory"}
        r = await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(cfg).encode(),
                             timeout=10)
        assert "error" not in json.loads(r.data), r.data
        off = {"name": f"{name}N", "subjects": [f"{s}n.>"], "storage": "memory"}
        await nc.request(f"$JS.API.STREAM.CREATE.{name}N", json.dumps(off).encode(),
                         timeout=10)
        rep = _Replies(nc, f"{s}.mark")
        await rep.start()
        a, h = f"{s}.a", f"{s}.h"
        steps = [
            [(f"{s}n.a", fi("d", 1, START), b"x", None)],  # batch publish disabled
            [(a, fi("p", 1, 7), b"x", None)],  # an op that does not exist
            [(a, fi("p", 2, START), b"x", None)],  # start at 2
            [(a, fi("p", 1, APPEND), b"x", None)],  # append at 1
            [(a, fi("p", 1, EOB), b"x", None)],  # end of batch at 1
            [(a, fi("p", 1, START, gap="maybe"), b"x", None)],
            [(a, fi("x" * 65, 1, START), b"x", None)],  # id too long
            [(a, "fb.p.x.fail.1.0.$FI", b"x", None)],  # flow not a number: 10
            [(a, "fb.q.0.fail.1.0.$FI", b"q", None)],  # ... and q stays open
            [(a, fi("u", 2, APPEND), b"x", None)],  # never began
            [(a, fi("one", 1, COMMIT), b"one", None)],  # a batch of one
            batch("b2", a, 5, flow=2),
            batch("b3", a, 25),  # the default flow
            batch("b3e", a, 12, flow=3, last=EOB),  # end of batch: the last not stored
            batch("gf", a, 1, last=None) + [(a, fi("gf", 3, APPEND), b"gf3", None)],
            batch("go", a, 1, gap="ok", last=None) + [
                (a, fi("go", 3, APPEND, gap="ok"), b"go3", None),
                (a, fi("go", 4, EOB, gap="ok"), b"go4", None)],
            batch("pg", a, 2, flow=3, last=None) + [
                (a, fi("pg", 2, PING, 3), b"", None),
                (a, fi("pg", 6, PING, 3, ), b"", None)],  # a gap seen by a ping: fail
            batch("po", a, 2, flow=2, gap="ok", last=None) + [
                (a, fi("po", 5, PING, 2, "ok"), b"", None),
                (a, fi("po", 6, APPEND, 2, "ok"), b"po6", None),
                (a, fi("po", 7, COMMIT, 2, "ok"), b"po7", None)],
            batch("re", a, 2, last=None) + [(a, fi("re", 1, START), b"again", None)],
            batch("kb", a, 3, gap="ok", last=None) + [  # going back ends it in mode ok too
                (a, fi("kb", 2, APPEND, gap="ok"), b"kb2", None),
                (a, fi("kb", 4, COMMIT, gap="ok"), b"kb4", None)],
            # two batches at once: the second starts with an ack every message
            [(a, fi("i1", 1, START, 4), b"i", None), (a, fi("i2", 1, START, 4), b"j", None),
             (a, fi("i1", 2, APPEND, 4), b"i", None), (a, fi("i2", 2, APPEND, 4), b"j", None),
             (a, fi("i1", 3, APPEND, 4), b"i", None), (a, fi("i2", 3, COMMIT, 4), b"j", None),
             (a, fi("i1", 4, COMMIT, 4), b"i", None)],
            # a plain publish between a batch's messages
            batch("pl", a, 2, last=None) + [(a, "fb.plain", b"plain", None),
                                             (a, fi("pl", 3, COMMIT), b"pl3", None)],
            # duplicates and refusals
            [(h, fi("d1", 1, START), b"d", {"Nats-Msg-Id": "m1"}),
             (h, fi("d1", 2, APPEND), b"d", {"Nats-Msg-Id": "m1"}),
             (h, fi("d1", 3, COMMIT), b"d", {"Nats-Msg-Id": "m2"})],
            [(h, fi("d2", 1, START), b"d", {"Nats-Msg-Id": "m1"})],  # the first a duplicate
            [(h, fi("d3", 1, START, 3), b"d", None)] + [
                (h, fi("d3", i, APPEND, 3), b"d", {"Nats-Msg-Id": "m1"}) for i in (2, 3, 4)
            ] + [(h, fi("d3", 5, COMMIT, 3), b"d", {"Nats-Msg-Id": "m1"})],
            [(h, fi("e1", 1, START), b"e", None),
             (h, fi("e1", 2, APPEND), b"e", {"Nats-Expected-Last-Sequence": "1"}),
             (h, fi("e1", 3, APPEND), b"e", None)],
            [(h, fi("e2", 1, START, gap="ok"), b"e", None),
             (h, fi("e2", 2, APPEND, gap="ok"), b"e", {"Nats-Expected-Last-Sequence": "1"}),
             (h, fi("e2", 3, COMMIT, gap="ok"), b"e", {"X": "y"})],
            [(h, fi("e3", 1, COMMIT), b"e", {"Nats-Expected-Last-Sequence": "1"})],
            [(h, fi("e4", 1, START, gap="ok"), b"e", {"Nats-Expected-Last-Sequence": "1"}),
             (h, fi("e4", 2, COMMIT, gap="ok"), b"e", None)],
            [(f"{s}.w", fi("ws", 1, COMMIT), b"*", None)],
            [(a, "fb.$FI", b"junk", None), (a, "fb.x.y.$FI", b"junk", None)],
        ]
        answers = [await rep.step(st) for st in steps]
        stored = await _stored(nc, name)
        for n in (name, f"{name}N"):
            await nc.request(f"$JS.API.STREAM.DELETE.{n}", b"", timeout=10)
        return answers, stored
    finally:
        await nc.close()


def _normal(answers: list, name: str) -> list:
    return [[(subj, a.replace(name, "S")) for subj, a in step] for step in answers]


def test_fast_batches_answer_and_store_as_nats_server(gateway, nats_server,  # noqa: F811
                                                      stream_name,  # noqa: F811
                                                      drop_new_streams):  # noqa: F811
    gw = gateway()
    expected = asyncio.run(_scenario(nats_server.url, stream_name))
    got = asyncio.run(_scenario(f"nats://127.0.0.1:{gw.port}", stream_name))
    exp_answers, exp_stored = expected
    # what nats-server answered, in part (the scenario does what it says)
    assert json.loads(exp_answers[0][0][1])["error"]["err_code"] == 10205
    assert [json.loads(x)["error"]["err_code"] for _, x in sum(exp_answers[1:7], [])] == [
        10206, 10206, 10206, 10206, 10206, 10207]
    assert json.loads(exp_answers[11][-1][1]) == {
        "stream": stream_name, "seq": 8, "batch": "b2", "count": 5}
    assert [json.loads(x)["type"] for _, x in exp_answers[11][:-1]] == ["ack"] * 3
    mismatched = [(i, g, e) for i, (g, e) in enumerate(zip(
        _normal(got[0], stream_name), _normal(exp_answers, stream_name))) if g != e]
    assert not mismatched, json.dumps(mismatched, indent=0)
    assert len(got[0]) == len(exp_answers)
    assert got[1] == exp_stored


def test_an_idle_fast_batch_is_dropped(gateway, stream_name, drop_new_streams,  # noqa: F811
                                       monkeypatch):
    """No message for BATCH_TIMEOUT (10 s in nats-server, shortened here): the batch is
    gone, its next message answered 'batch publish ID unknown'."""
    monkeypatch.setattr(fast_batch, "BATCH_TIMEOUT", 0.2)
    gw = gateway()

    async def run() -> list:
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        s = stream_name.lower()
        cfg = {"name": stream_name, "subjects": [f"{s}.>"], "allow_batched": True}
        await nc.request(f"$JS.API.STREAM.CREATE.{stream_name}", json.dumps(cfg).encode(),
                         timeout=10)
        rep = _Replies(nc, f"{s}.mark")
        await rep.start()
        out = [await rep.step([(f"{s}.a", fi("t", 1, START), b"1", None)])]
        batches = gw.gateway.bridge.publisher.fast
        deadline = asyncio.get_running_loop().time() + 5
        while not batches.expired(stream_name, "t"):  # polls the batch's idle time
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        out.append(await rep.step([(f"{s}.a", fi("t", 2, COMMIT), b"2", None)]))
        out.append(await rep.step([(f"{s}.a", fi("t", 1, COMMIT), b"3", None)]))  # anew
        await nc.close()
        return out

    got = asyncio.run(run())
    assert [json.loads(x) for _, x in got[0]] == [{"type": "ack", "seq": 0, "msgs": 10}]
    assert json.loads(got[1][0][1])["error"]["err_code"] == 10208, got
    assert json.loads(got[2][0][1]) == {"stream": stream_name, "seq": 2, "batch": "t",
                                        "count": 1}, got


async def _configs(url: str, name: str) -> list:
    nc = await nats.connect(url)
    out = []
    try:
        async def ask(subject: str, cfg: dict) -> None:
            r = await nc.request(subject, json.dumps(cfg).encode(), timeout=10)
            doc = json.loads(r.data)
            if "error" in doc:
                out.append(doc["error"])
            else:
                c = doc["config"]
                out.append({k: c.get(k) for k in ("allow_batched", "allow_atomic")}
                           | {"level": c.get("metadata", {}).get("_nats.req.level")})

        base = {"name": name, "subjects": [f"{name.lower()}.>"], "storage": "memory"}
        await ask(f"$JS.API.STREAM.CREATE.{name}", base)
        await ask(f"$JS.API.STREAM.UPDATE.{name}", base | {"allow_batched": True})
        await ask(f"$JS.API.STREAM.UPDATE.{name}", base | {"allow_batched": True,
                                                            "allow_atomic": True})
        await ask(f"$JS.API.STREAM.UPDATE.{name}", base)
        mirror = {"name": f"{name}M", "mirror": {"name": name}, "storage": "memory"}
        await ask(f"$JS.API.STREAM.CREATE.{name}M", mirror | {"allow_batched": True})
        await ask(f"$JS.API.STREAM.CREATE.{name}M", mirror | {"allow_batched": True,
                                                               "allow_atomic": True})
        await ask(f"$JS.API.STREAM.CREATE.{name}B", {
            "name": f"{name}B", "subjects": [f"{name.lower()}b"], "allow_batched": True,
            "persist_mode": "async"})
        for n in (name, f"{name}B"):
            await nc.request(f"$JS.API.STREAM.DELETE.{n}", b"", timeout=10)
        return out
    finally:
        await nc.close()


def test_allow_batched_config_as_nats_server(gateway, nats_server, stream_name,  # noqa: F811
                                             drop_new_streams):  # noqa: F811
    gw = gateway()
    expected = asyncio.run(_configs(nats_server.url, stream_name))
    got = asyncio.run(_configs(f"nats://127.0.0.1:{gw.port}", stream_name))
    assert expected[1] == {"allow_batched": True, "allow_atomic": None, "level": "4"}
    assert expected[4]["err_code"] == 10209
    assert got == expected
