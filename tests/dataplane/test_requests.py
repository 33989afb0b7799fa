"""Requests over data-plane connections: answered by id with many in flight, errors as
documents, a lost connection failing what was in flight and the next request reconnecting,
back-pressure at the in-flight limit, and decoders that take only well-formed payloads."""

from __future__ import annotations

import asyncio
import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.dataplane import (
    AuthError,
    ConnectFailed,
    DataPlaneClient,
    DataPlaneServer,
    FrameError,
    RemoteError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from rayjet.dataplane.frames import Kind, pack_frame, read_frame
from tests.dataplane.helpers import SECRET, Inbox, run, wait_until
from tests.dataplane.test_transport import _authenticated


async def _serve(handler, **kwargs) -> DataPlaneServer:
    return await DataPlaneServer.start(Inbox(), secret=SECRET, serve_request=handler, **kwargs)


def _client(server, **kwargs) -> DataPlaneClient:
    return DataPlaneClient(server.address, secret=SECRET, process_id="client", **kwargs)


async def _echo(target, method, args, kwargs):
    if method == "fail":
        raise ValueError(f"{target} refuses: {args[0]}")
    if method == "slow":
        await asyncio.sleep(args[0])
    return {"target": target, "method": method, "args": args, "kwargs": kwargs}


def test_requests_are_answered_with_their_values_and_errors():
    async def main():
        server = await _serve(_echo)
        client = _client(server)
        got = await client.request("rayjet.stream.G-r0", "info", [1, b"x"], {"a": None})
        assert got == {"target": "rayjet.stream.G-r0", "method": "info",
                       "args": [1, b"x"], "kwargs": {"a": None}}
        with pytest.raises(RemoteError, match="refuses: no") as err:
            await client.request("t", "fail", ["no"])
        assert err.value.doc["type"] == "ValueError"
        assert server.stats["requests"] == 2 and server.stats["request_errors"] == 1
        await client.close()
        await server.close()

    run(main())


def test_many_requests_in_flight_are_matched_to_their_answers_whatever_the_order():
    async def main():
        server = await _serve(_echo)
        client = _client(server)
        delays = [random.random() / 50 for _ in range(300)]
        answers = await asyncio.gather(*(client.request("t", "slow", [d, i])
                                         for i, d in enumerate(delays)))
        assert [a["args"][1] for a in answers] == list(range(300))
        assert client.stats["connects"] == 1
        await client.close()
        await server.close()

    run(main())


def test_errors_are_made_by_the_callers_rules_and_unencodable_results_still_answer():
    class Refused(Exception):
        pass

    async def handler(target, method, args, kwargs):
        if method == "odd":
            return object()  # msgpack cannot carry it: an error answer, not a hang
        raise Refused("nope")

    async def main():
        server = await DataPlaneServer.start(
            Inbox(), secret=SECRET, serve_request=handler,
            error_to_wire=lambda exc: {"type": "Refused", "description": str(exc), "code": 409})
        client = _client(server, error_from_wire=lambda doc: KeyError(doc["code"]))
        with pytest.raises(KeyError, match="409"):
            await client.request("t", "m")
        with pytest.raises(KeyError):
            await client.request("t", "odd")
        await client.close()
        await server.close()

    run(main())


def test_a_lost_connection_fails_what_was_in_flight_and_the_next_request_reconnects():
    async def main():
        server = await _serve(_echo)
        client = _client(server)
        pending = asyncio.ensure_future(client.request("t", "slow", [30]))
        await wait_until(lambda: server.stats.get("requests") == 1, what="the request served")
        server.drop_connections()
        with pytest.raises(ConnectionError):
            await pending
        assert (await client.request("t", "again"))["method"] == "again"
        assert client.stats["connects"] == 2
        await client.close()
        with pytest.raises(ConnectionError):
            await client.request("t", "closed")
        await server.close()

    run(main())


def test_a_timeout_leaves_the_connection_usable():
    async def main():
        server = await _serve(_echo)
        client = _client(server)
        with pytest.raises(TimeoutError):
            await client.request("t", "slow", [5], timeout=0.05)
        assert (await client.request("t", "fast"))["method"] == "fast"
        await client.close()
        await server.close()

    run(main())


def test_the_server_reads_no_more_requests_while_at_its_in_flight_limit():
    release = asyncio.Event()
    started = []

    async def handler(target, method, args, kwargs):
        started.append(args[0])
        await release.wait()
        return args[0]

    async def main():
        server = await _serve(handler)
        server.max_in_flight = 4
        client = _client(server)
        calls = [asyncio.ensure_future(client.request("t", "m", [i])) for i in range(10)]
        await wait_until(lambda: len(started) == 4, what="four served")
        await asyncio.sleep(0.1)  # the other six stay unread while four are served
        assert len(started) == 4
        release.set()
        assert await asyncio.gather(*calls) == list(range(10))
        await client.close()
        await server.close()

    run(main())


def test_requests_need_the_secret_and_a_server_without_a_handler_refuses_them():
    async def main():
        server = await _serve(_echo)
        stranger = DataPlaneClient(server.address, secret=b"another cluster's secret",
                                   process_id="stranger")
        with pytest.raises(ConnectFailed) as refused:  # nothing was sent
            await stranger.request("t", "m")
        assert isinstance(refused.value.__cause__, AuthError)
        await wait_until(lambda: server.stats["auth_failures"] == 1, what="the refusal")
        raft_only = await DataPlaneServer.start(Inbox(), secret=SECRET)
        reader, writer = await _authenticated(raft_only)
        writer.write(pack_frame(Kind.REQUEST, encode_request(1, "t", "m", [], {})))
        frame = await read_frame(reader)
        assert frame is not None and frame.kind == Kind.ERROR
        assert raft_only.stats["bad_frames"] == 1
        writer.close()
        for s in (server, raft_only):
            await s.close()

    run(main())


def test_a_malformed_request_closes_only_its_connection():
    async def main():
        server = await _serve(_echo)
        reader, writer = await _authenticated(server)
        writer.write(pack_frame(Kind.REQUEST, msgpack.packb([1, "t", "m", {}, []])))
        frame = await read_frame(reader)
        assert frame is not None and frame.kind == Kind.ERROR
        writer.close()
        client = _client(server)  # others are served on
        assert (await client.request("t", "ok"))["method"] == "ok"
        await client.close()
        await server.close()

    run(main())


values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(rid=st.integers(0, 2**64 - 1), target=st.text(min_size=1, max_size=40),
       method=st.text(min_size=1, max_size=30), args=st.lists(values, max_size=4),
       kwargs=st.dictionaries(st.text(max_size=8), values, max_size=4))
def test_requests_and_responses_round_trip(rid, target, method, args, kwargs):
    assert decode_request(encode_request(rid, target, method, args, kwargs)) == (
        rid, target, method, args, kwargs)
    assert decode_response(encode_response(rid, True, args)) == (rid, True, args)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=200) | values.map(lambda v: msgpack.packb(v)))
def test_decoders_raise_only_frame_errors(data):
    for decode in (decode_request, decode_response):
        try:
            decode(data)
        except FrameError:
            pass
