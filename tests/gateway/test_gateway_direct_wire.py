"""Direct gets through the gateway on the wire as nats-server 2.15.1 answers them: batched
and multi_last gets (ADR-31), their EOB statuses and errors, and single gets, the same raw
requests sent over a socket to a nats-server started here and to the gateway, answers
compared byte for byte once timestamps are set aside."""

from __future__ import annotations

import asyncio
import json
import re

import nats
import pytest

from benchmarks.natsbase import NatsServer
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401

_STAMP = re.compile(rb"Nats-Time-Stamp: [^\r]*")

# (subject suffix after the stream's name, body)
REQUESTS = [
    ("", b'{"batch":3,"seq":1}'),
    ("", b'{"batch":10,"seq":4}'),
    ("", b'{"batch":2,"next_by_subj":"S.a"}'),
    ("", b'{"batch":5,"next_by_subj":"S.*"}'),
    ("", b'{"batch":1,"seq":2}'),
    ("", b'{"batch":2,"seq":100}'),
    ("", b'{"batch":2,"seq":1,"max_bytes":3}'),
    ("", b'{"batch":2,"seq":1,"no_hdr":true}'),
    ("", b'{"batch":2,"start_time":"2000-01-01T00:00:00Z"}'),
    ("", b'{"batch":-1,"seq":1}'),
    ("", b'{"multi_last":["S.>"]}'),
    ("", b'{"multi_last":["S.a","S.b"],"up_to_seq":4}'),
    ("", b'{"multi_last":["S.a","S.b"],"up_to_seq":2}'),
    ("", b'{"multi_last":["S.>"],"batch":1}'),
    ("", b'{"multi_last":["S.>"],"seq":6}'),
    ("", b'{"multi_last":["S.>"],"max_bytes":1}'),
    ("", b'{"multi_last":["X.>"]}'),
    ("", b'{"multi_last":["S.>"],"up_to_time":"2000-01-01T00:00:00Z"}'),
    ("", b'{"multi_last":["S.>"],"up_to_time":"2100-01-01T00:00:00Z"}'),
    ("", b'{"multi_last":["S.m.*"]}'),
    ("", b""),
    ("", b"{}"),
    ("", b"nope"),
    ("", b'{"seq":"1"}'),
    ("", b'{"batch":2}'),
    ("", b'{"seq":1,"last_by_subj":"S.a"}'),
    ("", b'{"last_by_subj":"S.a","batch":2}'),
    ("", b'{"multi_last":["S.a"],"next_by_subj":"S.a"}'),
    ("", b'{"multi_last":["S.a"],"up_to_seq":1,"up_to_time":"2100-01-01T00:00:00Z"}'),
    ("", b'{"seq":4}'),  # single gets: a message with headers ...
    ("", b'{"seq":2}'),  # ... a deleted one
    ("", b'{"seq":4,"no_hdr":true}'),
    ("", b'{"last_by_subj":"S.b"}'),
    ("", b'{"next_by_subj":"S.a","seq":2}'),
    (".S.a", b""),  # last by subject in the request's subject
    (".S.a", b'{"no_hdr":true}'),
    (".S.a", b'{"seq":1}'),
    (".S.nope", b""),
]


def _terminal(body: bytes, hdr: bytes | None) -> bool:
    """Whether this answer ends a request's answers: a status, or a single get's message."""
    if hdr is not None and not hdr.startswith(b"NATS/1.0\r\n"):
        return True
    return not (b'"batch"' in body or b'"multi_last"' in body)


async def _exchange(port: int, stream: str, requests: list) -> list:
    """Each request's answers as (header block with timestamps set aside, payload)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await reader.readline()  # INFO
    writer.write(b'CONNECT {"verbose":false,"headers":true,"no_responders":true,'
                 b'"protocol":1}\r\nSUB _R.* 1\r\n')
    out = []
    for i, (suffix, body) in enumerate(requests):
        body = body.replace(b"S.", stream.encode() + b".")
        subject = f"$JS.API.DIRECT.GET.{stream}{suffix.replace('S.', stream + '.')}"
        writer.write(b"PUB %s _R.%d %d\r\n%s\r\n" % (subject.encode(), i, len(body), body))
        await writer.drain()
        answers: list = []
        while True:
            line = await asyncio.wait_for(reader.readline(), 10)
            if line.startswith(b"PING"):
                writer.write(b"PONG\r\n")
                continue
            if not line.startswith((b"HMSG", b"MSG")):
                continue
            parts = line.split()
            assert parts[1] == b"_R.%d" % i, (line, i)
            size = int(parts[-1])
            frame = await reader.readexactly(size + 2)
            hdr = None
            if parts[0] == b"HMSG":
                hlen = int(parts[-2])
                hdr, data = frame[:hlen], frame[hlen:size]
            else:
                data = frame[:size]
            answers.append((None if hdr is None else _STAMP.sub(b"Nats-Time-Stamp: T", hdr),
                            data))
            if _terminal(body, hdr):
                break
        out.append(answers)
    writer.close()
    return out


async def _setup(url: str, stream: str) -> None:
    nc = await nats.connect(url)
    cfg = {"name": stream, "subjects": [f"{stream}.>"], "allow_direct": True,
           "storage": "memory"}
    await nc.request(f"$JS.API.STREAM.CREATE.{stream}", json.dumps(cfg).encode(), timeout=10)
    for i in range(6):
        await nc.request(f"{stream}.{'ab'[i % 2]}", b"m%d" % i, timeout=5,
                         headers={"H": str(i)} if i == 3 else None)
    await nc.request(f"{stream}.m.x", b"mx", timeout=5)
    await nc.request(f"$JS.API.STREAM.MSG.DELETE.{stream}", b'{"seq":2}', timeout=5)
    await nc.close()


async def _drop(url: str, stream: str) -> None:
    nc = await nats.connect(url)
    await nc.request(f"$JS.API.STREAM.DELETE.{stream}", b"", timeout=10)
    await nc.close()


def _observe(url: str, port: int, stream: str, requests: list) -> list:
    async def run():
        await _setup(url, stream)
        try:
            return await _exchange(port, stream, requests)
        finally:
            await _drop(url, stream)
    return asyncio.run(run())


def test_direct_gets_answer_as_nats_server_byte_for_byte(gateway, nats_server,  # noqa: F811
                                                         stream_name,  # noqa: F811
                                                         drop_new_streams):  # noqa: F811
    gw = gateway()
    expected = _observe(nats_server.url, int(nats_server.url.rsplit(":", 1)[1]), stream_name,
                        REQUESTS)
    eob = b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 3\r\nNats-Last-Sequence: 4\r\n\r\n"
    assert expected[0][-1] == (eob, b""), expected[0]
    got = _observe(f"nats://127.0.0.1:{gw.port}", gw.port, stream_name, REQUESTS)
    for request, want, have in zip(REQUESTS, expected, got, strict=True):
        assert have == want, request


@pytest.fixture(scope="module")
def nats_server():
    with NatsServer() as server:
        yield server
