"""Server and sender over real sockets on 127.0.0.1: order, coalescing, strangers, restarts,
a peer that stops reading, TLS."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import sys
import time

import msgpack
import pytest

from rayjet.dataplane import DataPlaneSender, DataPlaneServer
from rayjet.dataplane.auth import client_handshake, server_handshake
from rayjet.dataplane.frames import Kind, frame_header, pack_frame, read_frame
from rayjet.raft.messages import Message, MessageType
from tests.dataplane.helpers import SECRET, Inbox, msg, run, wait_until
from tests.tls_certs import self_signed


async def _serve(inbox, **kwargs) -> DataPlaneServer:
    return await DataPlaneServer.start(inbox, secret=SECRET, **kwargs)


def test_messages_arrive_in_order():
    async def main():
        inbox = Inbox()
        server = await _serve(inbox)
        sender = DataPlaneSender(secret=SECRET)
        for i in range(300):
            assert sender.send(server.address, "g", [msg(i)])
            if i % 7 == 0:
                await asyncio.sleep(0)  # batches spread over many loop turns
        await inbox.wait_count(300)
        assert [m.index for m in inbox.messages()] == list(range(300))
        assert inbox.messages()[5] == msg(5)
        assert sender.connected(server.address)
        assert sender.stats["sent_batches"] == 300 and sender.stats["dropped"] == 0
        assert sender.stats["connects"] == 1 and server.stats["connections"] == 1
        assert server.stats["messages"] == 300
        await sender.close()
        await server.close()

    run(main())


def test_batches_of_one_turn_leave_coalesced():
    async def main():
        inbox = Inbox()
        server = await _serve(inbox)
        sender = DataPlaneSender(secret=SECRET)
        sender.send(server.address, "a", [msg(0)])
        await inbox.wait_count(1)
        frames, sent = server.stats["frames"], sender.stats["frames"]
        for i in range(1, 101):  # one turn: two groups interleaved
            assert sender.send(server.address, "a", [msg(i)])
            assert sender.send(server.address, "b", [msg(i), msg(i + 1000)])
        await inbox.wait_count(101 + 200)
        assert server.stats["frames"] - frames == 2  # one frame per group
        assert sender.stats["frames"] - sent == 2
        assert [m.index for m in inbox.messages("a")] == list(range(101))
        assert [m.index for m in inbox.messages("b")][:4] == [1, 1001, 2, 1002]
        await sender.close()
        await server.close()

    run(main())


def test_frames_split_at_max_frame_and_oversized_messages_are_refused():
    async def main():
        inbox = Inbox()
        server = await _serve(inbox, max_frame=64 * 1024)
        sender = DataPlaneSender(secret=SECRET, max_frame=64 * 1024)
        for i in range(100):
            assert sender.send(server.address, "g", [msg(i, b"d" * 4000)])
        await inbox.wait_count(100)
        assert [m.index for m in inbox.messages()] == list(range(100))
        assert 7 <= server.stats["frames"] <= 8
        assert not sender.send(server.address, "g", [msg(0, b"d" * 64 * 1024)])
        assert not sender.send(server.address, "g", [Message(MessageType.APP, "b", "a", term=-1)])
        assert not sender.send(server.address, "", [msg(0)])
        assert sender.stats["dropped"] == 3
        assert sender.connected(server.address)
        await sender.close()
        await server.close()

    run(main())


def test_wrong_secret_refused_and_nothing_delivered():
    async def main():
        inbox = Inbox()
        server = await _serve(inbox)
        sender = DataPlaneSender(secret=b"not the cluster's", backoff_min=10)
        assert sender.send(server.address, "g", [msg(1)])  # queued while connecting
        await wait_until(lambda: sender.stats["connect_failures"] == 1, what="refusal")
        await wait_until(lambda: server.stats["auth_failures"] == 1, what="server refusal")
        assert not sender.send(server.address, "g", [msg(2)])  # backing off: dropped
        assert not sender.connected(server.address)
        assert sender.stats["dropped"] == 2 and sender.stats["connects"] == 0
        assert inbox.batches == [] and server.stats["connections"] == 0
        await sender.close()
        await server.close()

    run(main())


async def _eof(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection."""
    return await asyncio.wait_for(reader.read(), 5)


async def _authenticated(server: DataPlaneServer):
    reader, writer = await asyncio.open_connection(*server.address)
    await client_handshake(reader, writer, secret=SECRET, process_id="raw")
    return reader, writer


def test_strangers_and_bad_frames_cost_only_their_connection():
    async def main():
        inbox = Inbox()
        server = await _serve(inbox, handshake_timeout=0.3, max_frame=1024)
        sender = DataPlaneSender(secret=SECRET)
        sender.send(server.address, "g", [msg(0)])
        await inbox.wait_count(1)
        conns = [await asyncio.open_connection(*server.address) for _ in range(3)]
        conns[0][1].write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        conns[1][1].write(frame_header(Kind.HELLO, 2**31))  # oversized length prefix
        # conns[2] says nothing: dropped at the handshake deadline
        for reader, _ in conns:
            await _eof(reader)
        assert server.stats["auth_failures"] == 3 and server.stats["bad_frames"] == 2
        authed = [await _authenticated(server) for _ in range(4)]
        authed[0][1].write(frame_header(Kind.RAFT, 1025))  # over max_frame
        authed[1][1].write(pack_frame(Kind.RAFT, b"\x92\xa1g\x91\x93"))  # malformed batch
        authed[2][1].write(pack_frame(Kind.HELLO, b""))  # unexpected after the handshake
        authed[3][1].write(pack_frame(Kind.PING, b"hi") + pack_frame(Kind.RAFT, b"\xc1"))
        for reader, _ in authed:
            await _eof(reader)
        assert server.stats["bad_frames"] == 6
        for _, writer in conns + authed:
            writer.close()
        sender.send(server.address, "g", [msg(1)])  # the server and the sender's link live on
        await inbox.wait_count(2)
        assert sender.stats["connects"] == 1 and server.stats["frames"] == 2
        await sender.close()
        await server.close()

    run(main())


def test_an_error_frame_explains_the_refusal_and_ping_is_answered():
    async def main():
        server = await _serve(Inbox(), max_frame=1024)
        reader, writer = await _authenticated(server)
        writer.write(pack_frame(Kind.PING, b"42"))
        assert await read_frame(reader) == (Kind.PONG, b"42")
        writer.write(frame_header(Kind.RAFT, 5000))
        error = await read_frame(reader)
        assert error.kind == Kind.ERROR and b"over the 1024-byte limit" in error.payload
        assert await read_frame(reader) is None
        writer.close()
        await server.close()

    run(main())


def test_handshake_flood_is_shed():
    async def main():
        server = await _serve(Inbox(), handshake_timeout=5, max_handshakes=1)
        silent = await asyncio.open_connection(*server.address)
        await wait_until(lambda: server.stats["accepted"] == 1, what="accept")
        second = await asyncio.open_connection(*server.address)
        assert await _eof(second[0]) == b""  # closed at once, not after 5 s
        assert server.stats["refused"] == 1
        for _, writer in (silent, second):
            writer.close()
        await server.close()

    run(main())


def test_deliver_errors_are_logged_and_the_connection_stays():
    async def main():
        inbox = Inbox()

        def deliver(group, messages):
            if messages[0].index == 0:
                raise RuntimeError("application bug")
            inbox(group, messages)

        server = await DataPlaneServer.start(deliver, secret=SECRET)
        sender = DataPlaneSender(secret=SECRET)
        sender.send(server.address, "g", [msg(0)])
        await wait_until(lambda: server.stats["deliver_errors"] == 1, what="deliver error")
        sender.send(server.address, "g", [msg(1)])
        await inbox.wait_count(1)
        assert sender.stats["connects"] == 1 and server.stats["connections"] == 1
        await sender.close()
        await server.close()

    run(main())


def test_reconnects_after_the_server_restarts():
    async def main():
        first = Inbox()
        server = await _serve(first)
        address = server.address
        sender = DataPlaneSender(secret=SECRET, backoff_min=0.05, backoff_max=0.2)
        sender.send(address, "g", [msg(0)])
        await first.wait_count(1)
        await server.close()  # killed: the sender sees its connection end
        await wait_until(lambda: not sender.connected(address), what="disconnect")
        # down: sends fail over (connect refused, then backoff) without raising
        for i in range(3):
            sender.send(address, "g", [msg(i)])  # dropped in backoff, or when connect fails
            await wait_until(lambda n=i: sender.stats["dropped"] == n + 1, what="drop")
        again = Inbox()
        server = await _serve(again, port=address[1])  # back on the same port
        deadline = time.monotonic() + 5
        while not again.batches:  # as raft does: send again every tick until it gets through
            assert time.monotonic() < deadline
            sender.send(address, "g", [msg(7)])
            await asyncio.sleep(0.02)
        assert again.messages()[0] == msg(7) and sender.stats["connects"] == 2
        moved = Inbox()
        other = await _serve(moved)  # restarted elsewhere: the new address is given
        sender.forget(address)
        assert sender.send(other.address, "g", [msg(8)])
        await moved.wait_count(1)
        assert not sender.connected(address) and sender.connected(other.address)
        await sender.close()
        assert not sender.send(other.address, "g", [msg(9)])
        await server.close()
        await other.close()

    run(main())


def test_backoff_drops_sends_until_it_expires():
    async def main():
        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            address = s.getsockname()
        sender = DataPlaneSender(secret=SECRET, backoff_min=30)
        assert sender.send(address, "g", [msg(0)])
        await wait_until(lambda: sender.stats["connect_failures"] == 1, what="refusal")
        assert not sender.send(address, "g", [msg(1)])
        assert sender.stats["dropped"] == 2 and sender.queued_bytes(address) == 0
        await sender.close()

    run(main())


def test_send_needs_the_running_loop():
    with pytest.raises(RuntimeError):
        DataPlaneSender(secret=SECRET).send(("127.0.0.1", 1), "g", [msg(0)])
    with pytest.raises(ValueError):
        DataPlaneSender(secret=b"")


class LoopWatch:
    """Measures the longest the event loop went without running a 5 ms timer."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            start = time.monotonic()
            await asyncio.sleep(0.005)
            self.worst = max(self.worst, time.monotonic() - start)

    def stop(self) -> float:
        self._task.cancel()
        return self.worst


def test_a_peer_that_stops_reading_costs_its_budget_and_no_loop_time():
    budget = 1024 * 1024
    payload = b"p" * 60_000

    async def main():
        stop = asyncio.Event()

        async def never_reads(reader, writer):  # authenticates, then reads nothing
            await server_handshake(reader, writer, secret=SECRET, process_id="stuck")
            await stop.wait()
            writer.close()

        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        listener.bind(("127.0.0.1", 0))
        server = await asyncio.start_server(never_reads, sock=listener)
        address = listener.getsockname()
        sender = DataPlaneSender(secret=SECRET, peer_budget=budget, stall_timeout=1.0)
        watch = LoopWatch()
        accepted, refused = 0, 0
        for i in range(3000):
            if sender.send(address, "g", [msg(i, payload)]):
                accepted += 1
            else:
                refused += 1
                if refused == 20:
                    break
            assert sender.queued_bytes(address) <= budget + 4096
            await asyncio.sleep(0)  # let the writer task run
        assert refused == 20 and accepted < 1000, (accepted, refused)
        # the stalled connection is dropped, and its queue with it
        await wait_until(lambda: sender.queued_bytes(address) == 0, timeout=10, what="stall")
        assert sender.stats["dropped"] >= 20
        assert watch.stop() < 1.0  # no send, write or drop blocked the loop
        stop.set()
        await sender.close()
        server.close()
        await server.wait_closed()

    run(main(), timeout=30)


CHILD = """
import asyncio, sys
from rayjet.dataplane import DataPlaneServer

async def main():
    count = 0
    def deliver(group, messages):
        nonlocal count
        count += len(messages)
        print(count, flush=True)
    server = await DataPlaneServer.start(deliver, secret=sys.argv[1].encode())
    print(server.port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until EOF
    await server.close()

asyncio.run(main())
"""


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_a_stopped_process_costs_its_budget_then_catches_up():
    budget = 1024 * 1024
    payload = b"q" * 60_000

    async def main():
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, SECRET.decode(), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, cwd=root)
        try:
            port = int(await asyncio.wait_for(child.stdout.readline(), 10))
            address = ("127.0.0.1", port)
            received = [0]
            progress = asyncio.Event()

            async def read_counts():
                async for line in child.stdout:
                    received[0] = int(line)
                    progress.set()

            counter = asyncio.get_running_loop().create_task(read_counts())
            sender = DataPlaneSender(secret=SECRET, peer_budget=budget)
            sender.send(address, "g", [msg(0)])
            async with asyncio.timeout(5):
                while received[0] < 1:
                    progress.clear()
                    await progress.wait()
            os.kill(child.pid, signal.SIGSTOP)
            watch = LoopWatch()
            accepted, refused = 1, 0
            for i in range(1, 3000):
                if sender.send(address, "g", [msg(i, payload)]):
                    accepted += 1
                elif (refused := refused + 1) == 20:
                    break
                assert sender.queued_bytes(address) <= budget + 4096
                await asyncio.sleep(0)
            assert refused == 20, accepted
            assert watch.stop() < 1.0
            assert sender.connected(address)  # stopped is not dead
            os.kill(child.pid, signal.SIGCONT)
            async with asyncio.timeout(10):  # everything accepted arrives
                while received[0] < accepted:
                    progress.clear()
                    await progress.wait()
            assert received[0] == accepted
            assert sender.queued_bytes(address) == 0
            await sender.close()
            counter.cancel()
        finally:
            os.kill(child.pid, signal.SIGCONT)
            child.stdin.close()
            try:
                await asyncio.wait_for(child.wait(), 5)
            except TimeoutError:
                child.kill()
                await child.wait()

    run(main(), timeout=40)


def _self_signed(tmp_path):
    return self_signed(tmp_path, "rayjet-dataplane", ("127.0.0.1",))


def test_tls(tmp_path):
    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))

    async def main():
        inbox = Inbox()
        server = await _serve(inbox, ssl_context=server_ctx)
        by_ip = DataPlaneSender(secret=SECRET, ssl_context=client_ctx)
        by_name = DataPlaneSender(secret=SECRET, ssl_context=client_ctx,
                                  server_hostname="rayjet-dataplane")
        assert by_ip.send(server.address, "g", [msg(1, b"secret payload")])
        assert by_name.send(server.address, "g", [msg(2)])
        await inbox.wait_count(2)
        assert sorted(m.index for m in inbox.messages()) == [1, 2]
        plain = DataPlaneSender(secret=SECRET)  # plain text to a TLS server gets nowhere
        wrong_name = DataPlaneSender(secret=SECRET, ssl_context=client_ctx,
                                     server_hostname="elsewhere")
        for sender in (plain, wrong_name):
            sender.send(server.address, "g", [msg(3)])
            await wait_until(lambda s=sender: s.stats["connect_failures"] == 1, what="refusal")
        assert len(inbox.messages()) == 2
        for sender in (by_ip, by_name, plain, wrong_name):
            await sender.close()
        await server.close()

    run(main())


def test_raw_clients_cannot_make_the_server_unpack_anything_but_batches():
    """A valid msgpack object that is no batch closes the connection like any bad frame."""
    async def main():
        inbox = Inbox()
        server = await _serve(inbox)
        reader, writer = await _authenticated(server)
        writer.write(pack_frame(Kind.RAFT, msgpack.packb({"__reduce__": "os.system"})))
        await _eof(reader)
        writer.close()
        assert inbox.batches == [] and server.stats["bad_frames"] == 1
        await server.close()

    run(main())


def test_a_lost_connection_is_made_again_at_once_and_a_refusal_is_reported():
    """The other end closing a connection makes the sender connect again with nothing
    queued; when nothing listens there any more (its process died), ``on_refused`` says
    so at once, which is how raft peers learn of a dead leader before Ray's notice."""
    async def main():
        inbox = Inbox()
        refused = []
        server = await _serve(inbox)
        address = server.address
        sender = DataPlaneSender(secret=SECRET, on_refused=refused.append)
        assert sender.send(address, "g", [msg(1)])
        await inbox.wait_count(1)
        server.drop_connections()  # a cut: the server is still there
        await wait_until(lambda: sender.stats["connects"] == 2, what="reconnect, unasked")
        assert refused == []
        await server.close()  # the process is gone: its port refuses
        await wait_until(lambda: refused == [address], what="the refusal reported")
        assert sender.stats["refused"] == 1
        await sender.close()

    run(main())
