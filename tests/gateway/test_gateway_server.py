"""The gateway with real clients: nats.py and raw sockets against a GatewayThread over the
session's rayjet (core routing, auth, bad input, batching of publishes)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import nats
import pytest
from nats.errors import NoRespondersError

from rayjet.gateway import GatewayOptions, GatewayThread
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gateway(js):  # noqa: F811
    def start(**options):
        gw = GatewayThread(js, GatewayOptions(port=_free_port(), **options))
        gw.start()
        started.append(gw)
        return gw

    started: list[GatewayThread] = []
    yield start
    for gw in started:
        gw.stop()


async def _raw(port: int, data: bytes, read: int = 4096) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await reader.readline()  # INFO
    writer.write(data)
    await writer.drain()
    out = b""
    try:
        while len(out) < read:
            chunk = await asyncio.wait_for(reader.read(read), 2)
            if not chunk:
                break
            out += chunk
    except TimeoutError:
        pass
    writer.close()
    return out


def test_core_routing_queue_groups_and_no_responders(gateway):
    gw = gateway()
    url = f"nats://127.0.0.1:{gw.port}"

    async def run():
        a, b = await nats.connect(url), await nats.connect(url)
        plain, workers = [], {"a": 0, "b": 0}

        async def everything(m):
            plain.append(m.subject)

        await a.subscribe("jobs.>", cb=everything)

        async def work_a(m):
            workers["a"] += 1

        async def work_b(m):
            workers["b"] += 1
            if m.reply:
                await m.respond(b"done:" + m.data)

        await a.subscribe("jobs.*", queue="w", cb=work_a)
        await b.subscribe("jobs.*", queue="w", cb=work_b)
        await a.flush()
        await b.flush()
        for i in range(200):
            await b.publish(f"jobs.{i}", b"x")
        await b.flush()
        await a.flush()
        await asyncio.sleep(0.2)
        with pytest.raises(NoRespondersError):
            await a.request("nobody.listens", b"?", timeout=2)
        await a.close()
        await b.close()
        return plain, workers

    plain, workers = asyncio.run(run())
    assert sorted(plain) == sorted(f"jobs.{i}" for i in range(200))
    assert workers["a"] + workers["b"] == 200 and workers["a"] and workers["b"]


def test_bad_input_gets_nats_server_errors(gateway):
    gw = gateway(max_payload=64)
    ok = b'CONNECT {"verbose":true,"headers":true}\r\n'
    out = asyncio.run(_raw(gw.port, ok + b"SUB a..b 1\r\nSUB a.* 2\r\nPUB a.x 2\r\nhi\r\n"
                                   b"PING\r\n"))
    assert b"-ERR 'Invalid Subject'" in out  # the connection stays
    assert out.count(b"+OK") >= 3 and b"MSG a.x 2 2\r\nhi\r\n" in out and b"PONG" in out
    out = asyncio.run(_raw(gw.port, ok + b"PUB a 65\r\n" + b"x" * 65 + b"\r\nPING\r\n"))
    assert b"-ERR 'Maximum Payload Violation'" in out and b"PONG" not in out
    out = asyncio.run(_raw(gw.port, ok + b"NOPE\r\nPING\r\n"))
    assert b"-ERR 'Unknown Protocol Operation'" in out and b"PONG" not in out


def test_wildcard_publish_subjects_are_stored_literally_unless_pedantic(
        gateway, js, stream_name, drop_new_streams):  # noqa: F811
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        answer = await nc.request(f"{stream_name}.x.*", b"star", timeout=5)
        await nc.close()
        return answer.data

    assert b'"seq":1' in asyncio.run(run())
    assert js.get_msg(stream_name, 1).subject == f"{stream_name}.x.*"
    pedantic = b'CONNECT {"verbose":true,"pedantic":true}\r\n'
    out = asyncio.run(_raw(gw.port, pedantic + f"PUB {stream_name}.y.> 1\r\nz\r\n"
                                                "PING\r\n".encode()))
    assert b"-ERR 'Invalid Publish Subject'" in out
    assert js.stream_info(stream_name).state.messages == 1


@pytest.mark.parametrize("options,good,bad", [
    ({"token": "t0k"}, b'{"auth_token":"t0k"}', b'{"auth_token":"nope"}'),
    ({"user": "u", "password": "p"}, b'{"user":"u","pass":"p"}', b'{"user":"u","pass":"x"}'),
])
def test_auth(gateway, options, good, bad):
    gw = gateway(**options)
    assert b"PONG" in asyncio.run(_raw(gw.port, b"CONNECT " + good + b"\r\nPING\r\n"))
    out = asyncio.run(_raw(gw.port, b"CONNECT " + bad + b"\r\nPING\r\n"))
    assert b"-ERR 'Authorization Violation'" in out and b"PONG" not in out
    out = asyncio.run(_raw(gw.port, b"PING\r\n"))  # nothing before CONNECT
    assert b"-ERR 'Authorization Violation'" in out


def test_publishes_that_arrive_together_leave_in_few_calls(gateway, js, stream_name,  # noqa: F811
                                                           drop_new_streams, monkeypatch):  # noqa: F811
    from rayjet.client.stream_link import StreamLink
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    calls = []

    def counting(real, size):
        async def counted(self, msgs, **kw):
            calls.append(size(msgs))
            return await real(self, msgs, **kw)
        return counted

    monkeypatch.setattr(StreamLink, "publish", counting(StreamLink.publish, len))
    monkeypatch.setattr(StreamLink, "publish_table",
                        counting(StreamLink.publish_table, lambda t: t.num_rows))
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        jsc = nc.jetstream()
        futs = [await jsc.publish_async(f"{stream_name}.{i % 7}", str(i).encode())
                for i in range(500)]
        acks = await asyncio.gather(*futs)
        await nc.close()
        return acks

    acks = asyncio.run(run())
    assert [a.seq for a in acks] == list(range(1, 501))  # in order, each once
    assert sum(calls) == 500 and len(calls) < 100
    msg = js.get_msg(stream_name, 321)
    assert msg.data == b"320" and msg.subject == f"{stream_name}.{320 % 7}"


def test_publishes_to_a_stream_the_gateway_has_not_seen_yet_keep_their_order(
        gateway, js, stream_name, drop_new_streams, monkeypatch):  # noqa: F811
    # another client makes the stream; the gateway learns of it only when a publish asks,
    # and its refresh ends a while after the new catalogue is in place: publishes that
    # come in that while must queue behind the one that asked, not overtake it
    from rayjet.gateway import jetstream as bridge_module

    real_refresh = bridge_module.JetStreamBridge.refresh_catalogue

    async def not_followed(self):
        await asyncio.Event().wait()

    async def slow_to_end(self, *args, **kwargs):
        await real_refresh(self, *args, **kwargs)
        await asyncio.sleep(0.5)

    monkeypatch.setattr(bridge_module.JetStreamBridge, "_catalogue_loop", not_followed)
    monkeypatch.setattr(bridge_module.JetStreamBridge, "refresh_catalogue", slow_to_end)
    gw = gateway()
    (bridge,) = gw.gateway.bridges.values()
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        first = asyncio.ensure_future(nc.request(f"{stream_name}.a", b"0", timeout=10))
        deadline = time.monotonic() + 10
        while bridge.stream_for(f"{stream_name}.b") is None:  # the new catalogue is in
            assert time.monotonic() < deadline, "the gateway never saw the stream"
            await asyncio.sleep(0.005)
        rest = [asyncio.ensure_future(nc.request(f"{stream_name}.b", str(i).encode(),
                                                 timeout=10)) for i in range(1, 6)]
        answers = [json.loads(m.data) for m in await asyncio.gather(first, *rest)]
        await nc.close()
        return answers

    answers = asyncio.run(run())
    assert [a["seq"] for a in answers] == [1, 2, 3, 4, 5, 6]
    assert [m.data for m in js.scan_stream(stream_name)] == [b"0", b"1", b"2", b"3", b"4", b"5"]


def test_acks_that_come_just_before_a_pull_travel_with_it(gateway, js, stream_name,  # noqa: F811
                                                          drop_new_streams, monkeypatch):  # noqa: F811
    from rayjet.client.consumers import ConsumerLink
    from rayjet.engine.consumer.delivery_batch import expand_ranges

    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    js.publish_batch([(f"{stream_name}.a", b"%d" % i) for i in range(40)])
    with_pulls, on_their_own = [], []
    real_pull, real_answer = ConsumerLink.pull, ConsumerLink.answer

    def pull(self, batch, expires, max_bytes=0, no_wait=False, heartbeat=0.0, acks=None,
             ranges=(), **kw):
        with_pulls.extend(expand_ranges(ranges))
        return real_pull(self, batch, expires, max_bytes, no_wait, heartbeat, acks, ranges,
                         **kw)

    def answer(self, acks, ranges=(), sync=False):
        on_their_own.extend([a[1] for a in acks] + expand_ranges(ranges))
        return real_answer(self, acks, ranges, sync)

    monkeypatch.setattr(ConsumerLink, "pull", pull)
    monkeypatch.setattr(ConsumerLink, "answer", answer)
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        psub = await nc.jetstream().pull_subscribe(f"{stream_name}.a", durable="D",
                                                   stream=stream_name)
        first = await psub.fetch(20)
        await nc.close()
        # a client acks what it fetched and asks for more, all in one write
        data = b"CONNECT {}\r\nSUB _INBOX.raw 1\r\n" + b"".join(
            b"PUB %s 0\r\n\r\n" % m.reply.encode() for m in first) + (
            b'PUB $JS.API.CONSUMER.MSG.NEXT.%s.D _INBOX.raw 12\r\n{"batch":20}\r\n'
            % stream_name.encode())
        return await _raw(gw.port, data, read=20 * 150)

    out = asyncio.run(run())
    assert out.count(b"MSG %s.a 1 $JS.ACK." % stream_name.encode()) == 20  # seqs 21..40
    info = js.consumer_info(stream_name, "D")
    assert info.ack_floor.stream_seq == 20 and info.num_ack_pending == 20
    assert sorted(with_pulls) == list(range(1, 21)) and on_their_own == []


def test_a_client_listening_on_ack_subjects_hears_acks_the_consumer_also_gets(
        gateway, js, stream_name, drop_new_streams):  # noqa: F811
    """Acks go straight to the consumer only while no client listens under $JS.ACK (as
    with nats-server, a subscriber there hears every ack)."""
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    js.publish_batch([(f"{stream_name}.a", b"%d" % i) for i in range(20)])
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        watcher = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        watch = await watcher.subscribe("$JS.>")  # hears API requests and acks
        await watcher.flush()
        psub = await nc.jetstream().pull_subscribe(f"{stream_name}.a", durable="W",
                                                   stream=stream_name)
        for m in await psub.fetch(10):
            await m.ack_sync()  # answered once the consumer has it
        floor_watched = js.consumer_info(stream_name, "W").ack_floor.stream_seq
        heard = []
        while len(heard) < 10:
            m = await watch.next_msg(timeout=5)
            if m.subject.startswith("$JS.ACK."):
                heard.append(m.subject)
        await watch.unsubscribe()
        await watcher.flush()
        for m in await psub.fetch(10):
            await m.ack_sync()
        floor_alone = js.consumer_info(stream_name, "W").ack_floor.stream_seq
        await nc.close()
        await watcher.close()
        return heard, floor_watched, floor_alone

    heard, floor_watched, floor_alone = asyncio.run(run())
    assert all(s.startswith(f"$JS.ACK.{stream_name}.W.") for s in heard)
    assert floor_watched == 10 and floor_alone == 20


def test_acked_publishes_survive_stream_leader_kills(gateway, js, stream_name):  # noqa: F811
    """nats.py publishes with msg ids through the gateway while the R3 stream's leader is
    killed twice; a publish that fails is sent again with the same id. Every acked id is
    stored once, at the seq its PubAck gave, on every replica."""
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js.errors import APIError as NatsAPIError

    from tests.cluster.test_faults import leader_id, replica_handles, wait_replicas_equal
    from tests.replicas import kill

    js.add_stream(name=stream_name, subjects=[f"{stream_name}.*"], num_replicas=3,
                  storage="file", duplicate_window=300)
    gw = gateway()

    async def publish_all(ids: list[str]) -> dict[str, int]:
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        jsc = nc.jetstream(timeout=10)
        acked: dict[str, int] = {}
        for msg_id in ids:
            for _ in range(60):
                try:
                    ack = await jsc.publish(f"{stream_name}.x", msg_id.encode(),
                                            headers={"Nats-Msg-Id": msg_id})
                    acked[msg_id] = ack.seq
                    break
                except (NatsTimeout, NatsAPIError):
                    await asyncio.sleep(0.2)
        await nc.close()
        return acked

    try:
        acked: dict[str, int] = {}
        for round_ in range(3):
            if round_:
                kill(replica_handles(js, stream_name)[leader_id(js, stream_name)])
            ids = [f"r{round_}-{i}" for i in range(100)]
            got = asyncio.run(publish_all(ids))
            assert set(got) == set(ids)
            acked.update(got)
        last = js.stream_info(stream_name).state.last_seq
        stored = wait_replicas_equal(js, stream_name, last, timeout=120)
        by_id = {data.decode(): seq for seq, data in stored}
        assert len(stored) == len(by_id) == 300 and by_id == acked
    finally:
        js.delete_stream(stream_name)


def test_deleted_consumers_end_their_pulls_and_pumps(gateway, js, stream_name,  # noqa: F811
                                                     drop_new_streams):  # noqa: F811
    """A push consumer and a waiting pull whose consumers are deleted: the pull ends with a
    status instead of hanging, the pump stops, and the gateway goes on serving."""
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.*"])
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        jsc = nc.jetstream()
        got = []

        async def cb(msg):
            got.append(msg.data)
            await msg.ack()

        await jsc.subscribe(f"{stream_name}.*", durable="pushed", cb=cb)
        pull = await jsc.pull_subscribe(f"{stream_name}.*", "pulled")
        waiting = asyncio.ensure_future(pull.fetch(1, timeout=8))
        await asyncio.sleep(0.5)
        await jsc.delete_consumer(stream_name, "pulled")
        await jsc.delete_consumer(stream_name, "pushed")
        started = asyncio.get_running_loop().time()
        with pytest.raises(Exception):  # noqa: B017 - nats.py raises a status error or timeout
            await waiting
        ended_after = asyncio.get_running_loop().time() - started
        ack = await jsc.publish(f"{stream_name}.a", b"after")
        await nc.close()
        return got, ended_after, ack.seq

    got, ended_after, seq = asyncio.run(run())
    assert got == [] and seq == 1
    assert ended_after < 8
    bridge = gw.gateway.bridge
    deadline = time.monotonic() + 10
    while bridge.push_consumers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not bridge.push_consumers()  # the pump of the deleted push consumer ended


def test_unsub_with_a_count_stops_after_that_many(gateway, js, stream_name,  # noqa: F811
                                                  drop_new_streams):  # noqa: F811
    """Core messages and a pull's batch to an inbox subscribed with UNSUB <sid> 2: two
    messages reach it, not more."""
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.*"])
    for i in range(5):
        js.publish(f"{stream_name}.a", str(i).encode())
    js.add_consumer(stream_name, durable_name="d", ack_policy="explicit")
    gw = gateway()
    hello = b'CONNECT {"headers":true}\r\n'
    core = b"SUB in.box 1\r\nUNSUB 1 2\r\n" + b"PUB in.box 1\r\nx\r\n" * 5 + b"PING\r\n"
    out = asyncio.run(_raw(gw.port, hello + core))
    assert out.count(b"MSG in.box 1 1\r\n") == 2 and b"PONG" in out
    pull = (b"SUB in.pull 7\r\nUNSUB 7 2\r\n"
            b'PUB $JS.API.CONSUMER.MSG.NEXT.' + stream_name.encode() +
            b'.d in.pull 12\r\n{"batch": 5}\r\n')
    out = asyncio.run(_raw(gw.port, hello + pull))
    assert out.count(b"MSG " + stream_name.encode() + b".a 7 $JS.ACK.") == 2


def test_connect_with_a_gateway_serves_until_closed(js, stream_name, drop_new_streams):  # noqa: F811
    import rayjet
    from rayjet.errors import BadRequestError

    with pytest.raises(BadRequestError, match="gateway must be"):
        rayjet.connect(gateway="yes please")
    port = _free_port()
    own = rayjet.connect(gateway={"port": port})
    assert own.gateway.port == port
    own.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])

    async def publish() -> int:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=0)
        ack = await nc.jetstream().publish(f"{stream_name}.a", b"x")
        await nc.close()
        return ack.seq

    assert asyncio.run(publish()) == 1
    own.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert js.stream_info(stream_name).state.messages == 1


def test_push_flow_control_stalls_until_the_subscriber_answers(
        gateway, js, stream_name, drop_new_streams, monkeypatch):  # noqa: F811
    from rayjet.gateway import pushing

    # the first window is a 16th of it (nats-server's slow start): 16 KB
    monkeypatch.setattr(pushing, "FC_WINDOW", 256 * 1024)
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    js.publish_batch([(f"{stream_name}.m", b"x" * 1024)] * 100)  # 100 KB: a few windows
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        got, requests, stalled = [], [], []

        async def on_msg(msg):
            if msg.headers and msg.headers.get("Status") == "100":
                if msg.reply:
                    requests.append(msg.reply)
                elif msg.headers.get("Nats-Consumer-Stalled"):
                    stalled.append(msg.headers["Nats-Consumer-Stalled"])
            else:
                got.append(msg)

        await nc.subscribe("fc.deliver", cb=on_msg)  # a plain subscriber: it answers nothing
        await nc.jetstream().add_consumer(stream_name, durable_name="FC",
                                          deliver_subject="fc.deliver", ack_policy="none",
                                          flow_control=True, idle_heartbeat=0.2)
        deadline = time.monotonic() + 20
        while not stalled and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        held = len(got)
        # stalled at the window: a request went out, nothing more comes until it is answered
        assert stalled and requests and stalled[-1] == requests[-1]
        assert requests[0].startswith(f"$JS.FC.{stream_name}.FC.")
        assert 8 <= held < 20  # about the first window (16 KB) of 1 KB messages
        await asyncio.sleep(0.5)
        assert len(got) == held
        # the answer (as nats.py sends it) lets the rest through, a window at a time (each
        # twice the last)
        while len(got) < 100 and time.monotonic() < deadline:
            if requests:
                await nc.publish(requests.pop())
            await asyncio.sleep(0.05)
        await nc.close()
        return [int(m.reply.split(".")[5]) for m in got]

    assert asyncio.run(run()) == list(range(1, 101))  # each once, in order


def test_nats_py_flow_controlled_subscriptions_get_everything(
        gateway, js, stream_name, drop_new_streams, monkeypatch):  # noqa: F811
    from rayjet.gateway import pushing

    monkeypatch.setattr(pushing, "FC_WINDOW", 32 * 1024)
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    js.publish_batch([(f"{stream_name}.m", str(i).encode() * 300) for i in range(300)])
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        jsc = nc.jetstream()
        sub = await jsc.subscribe(f"{stream_name}.m", ordered_consumer=True)
        seqs = []
        for _ in range(300):
            msg = await sub.next_msg(timeout=10)
            seqs.append(msg.metadata.sequence.stream)
        await nc.close()
        return seqs

    assert asyncio.run(run()) == list(range(1, 301))


def test_pull_requests_end_with_nats_server_statuses(
        gateway, js, stream_name, drop_new_streams):  # noqa: F811
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    gw = gateway()
    next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.P"

    async def ask(nc, sub, inbox, body: bytes):
        await nc.publish(next_subject, body, reply=inbox)
        msg = await sub.next_msg(timeout=10)
        return msg.headers or {}, msg.data

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        await nc.jetstream().add_consumer(stream_name, durable_name="P", ack_policy="explicit")
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        out = [await ask(nc, sub, inbox, b'{"batch":1,"no_wait":true}'),
               await ask(nc, sub, inbox, b'{"batch":2,"expires":200000000}')]
        await nc.jetstream().publish(f"{stream_name}.a", b"x" * 100)
        out.append(await ask(nc, sub, inbox, b'{"batch":1,"max_bytes":10}'))
        out.append(await ask(nc, sub, inbox, b'{"batch":1,"no_wait":true}'))
        # a no-wait pull that gets part of its batch ends with a 404 after it
        for body in (b"y", b"z"):
            await nc.jetstream().publish(f"{stream_name}.a", body)
        await nc.publish(next_subject, b'{"batch":5,"no_wait":true}', reply=inbox)
        out.append([await sub.next_msg(timeout=10) for _ in range(3)])
        await nc.close()
        return out

    empty, expired, too_big, one, partial = asyncio.run(run())
    assert [m.data for m in partial[:2]] == [b"y", b"z"], [
        (m.headers, m.data[:20]) for m in partial]
    assert partial[2].headers["Status"] == "404" and partial[2].data == b""
    assert empty[0]["Status"] == "404" and empty[0]["Description"] == "No Messages"
    assert expired[0]["Status"] == "408"
    assert expired[0]["Nats-Pending-Messages"] == "2"
    assert too_big[0]["Status"] == "409" and "MaxBytes" in too_big[0]["Description"]
    assert "Status" not in one[0] and one[1] == b"x" * 100


def test_a_batch_of_publishes_answers_each_one(
        gateway, js, stream_name, drop_new_streams):  # noqa: F811
    """Publishes that leave together as one table across two streams, with duplicates
    and refusals among them: each gets its own answer, in order."""
    import json

    other = stream_name[:-1] + "X"
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], duplicate_window=60)
    js.add_stream(name=other, subjects=[f"{other}.>"], max_msg_size=10)
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        asks = []
        for i in range(120):
            if i % 3 == 0:
                asks.append(nc.request(f"{other}.{i}", b"y" * (5 if i % 2 else 50), timeout=20))
            elif i % 10 == 1:
                asks.append(nc.request(f"{stream_name}.d", b"d", timeout=20,
                                       headers={"Nats-Msg-Id": "same"}))
            else:
                asks.append(nc.request(f"{stream_name}.{i}", b"x", timeout=20))
        replies = await asyncio.gather(*asks)  # sent together: they leave as one batch
        await nc.close()
        return [json.loads(r.data) for r in replies]

    answers = asyncio.run(run())
    ours = [a for i, a in enumerate(answers) if i % 3]
    assert [a["seq"] for a in ours if not a.get("duplicate")] == list(range(1, 80 - 7 + 1))
    assert sum(1 for a in ours if a.get("duplicate")) == 7
    assert all(a["stream"] == stream_name for a in ours)
    small = [a for i, a in enumerate(answers) if i % 3 == 0 and i % 2]
    big = [a for i, a in enumerate(answers) if i % 3 == 0 and not i % 2]
    assert [a["seq"] for a in small] == list(range(1, len(small) + 1))
    assert all(a["error"]["err_code"] == 10054 for a in big)


def test_buckets_through_the_cli_client(gateway, js, drop_new_streams, monkeypatch):  # noqa: F811
    """The CLI's NATS client (rayjet.remote) drives rayjet.kv.KeyValue: writes,
    compare-and-set, reads, and scans that page through a short-lived consumer."""
    from rayjet.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
    from rayjet.remote import connection, jetstream

    monkeypatch.setattr(jetstream, "SCAN_PAGE", 10)  # 25 revisions: three pages
    gw = gateway()
    client = jetstream.GatewayJetStream(connection.Requester(f"nats://127.0.0.1:{gw.port}", 10))
    try:
        kv = client.create_key_value(bucket="CLIGW", history=64)
        for i in range(25):
            kv.put(f"k.{i % 5}", f"v{i}".encode())
        assert kv.get("k.3").value == b"v23"
        assert [e.revision for e in kv.history("k.0")] == [1, 6, 11, 16, 21]
        assert sorted(kv.keys()) == [f"k.{i}" for i in range(5)]
        with pytest.raises(KeyWrongLastSequenceError):
            kv.update("k.1", b"stale", last=2)
        assert kv.update("k.1", b"fresh", last=22) == 26
        kv.delete("k.4")
        with pytest.raises(KeyNotFoundError):
            kv.get("k.4")
        assert sorted(kv.keys()) == [f"k.{i}" for i in range(4)]
        # no scan consumer is left behind
        assert js.consumer_names("KV_CLIGW") == []
        assert client.delete_key_value("CLIGW")
        with pytest.raises(BucketNotFoundError):
            client.key_value("CLIGW")
    finally:
        client.close()


def test_object_store_through_the_cli_client(gateway, js, drop_new_streams,  # noqa: F811
                                             monkeypatch):
    """rayjet.objectstore.ObjectStore over the CLI's NATS client: objects of many chunks go
    in and come back whole, read a page of chunks at a time; what the Python API stored
    reads the same, and the other way round."""
    import hashlib
    import io
    import os

    from rayjet.api import ObjectMeta, ObjectMetaOptions
    from rayjet.errors import BucketNotFoundError, ObjectNotFoundError
    from rayjet.objectstore import store
    from rayjet.remote import connection, jetstream

    monkeypatch.setattr(store, "READ_PAGE_BYTES", 4 * 128 * 1024)  # pages of 4 chunks
    gw = gateway()
    client = jetstream.GatewayJetStream(connection.Requester(f"nats://127.0.0.1:{gw.port}", 10))
    try:
        obs = client.create_object_store("CLIOBJ")
        blob = os.urandom(300_000)
        info = obs.put("a/blob", io.BytesIO(blob),
                       meta=ObjectMeta(options=ObjectMetaOptions(max_chunk_size=16384)))
        assert info.chunks == 19 and info.size == len(blob)
        got = client.object_store("CLIOBJ").get("a/blob")
        assert hashlib.sha256(got.data).digest() == hashlib.sha256(blob).digest()
        big = os.urandom(120_000)  # one large chunk
        obs.put("big", io.BytesIO(big),
                meta=ObjectMeta(options=ObjectMetaOptions(max_chunk_size=120_000)))
        assert obs.get("big").data == big
        # the Python API reads what the CLI stored, and the other way round
        assert js.object_store("CLIOBJ").get("a/blob").data == blob
        js.object_store("CLIOBJ").put("from-python", b"hello")
        assert obs.get("from-python").data == b"hello"
        assert sorted(i.name for i in obs.list()) == ["a/blob", "big", "from-python"]
        obs.delete("big")
        with pytest.raises(ObjectNotFoundError):
            obs.get("big")
        assert js.consumer_names("OBJ_CLIOBJ") == []  # no scan consumer left behind
        assert client.delete_object_store("CLIOBJ")
        with pytest.raises(BucketNotFoundError):
            client.object_store("CLIOBJ")
    finally:
        client.close()


def test_a_pulls_byte_limit_holds_for_the_whole_request(gateway, js, stream_name,  # noqa: F811
                                                        drop_new_streams):  # noqa: F811
    """max_bytes bounds everything one pull request gets, however many calls to the
    consumer serve it; the message that does not fit ends it with nats-server's 409."""
    import os

    from rayjet.errors import APIError
    from rayjet.remote import connection

    js.add_stream(name=stream_name, subjects=[f"{stream_name}.x"])
    js.publish_batch([(f"{stream_name}.x", os.urandom(16_000))] * 10)
    js.add_consumer(stream_name, durable_name="C", ack_policy="none")
    gw = gateway()
    requester = connection.Requester(f"nats://127.0.0.1:{gw.port}", 10)
    got = []
    try:
        with pytest.raises(APIError) as ended:
            for m in requester.pull(f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.C",
                                    {"batch": 100, "expires": 2_000_000_000,
                                     "max_bytes": 50_000}):
                got.append(m)
        assert ended.value.code == 409 and "MaxBytes" in str(ended.value)
        assert len(got) == 3  # 3 x ~16.1 kB fit in 50 kB, the 4th does not
    finally:
        requester.close()


def test_push_consumers_without_flow_control_get_everything(
        gateway, js, stream_name, drop_new_streams):  # noqa: F811
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    js.publish_batch([(f"{stream_name}.m", f"message {i}".encode()) for i in range(50)])
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        sub = await nc.jetstream().subscribe(f"{stream_name}.m", durable="PLAIN")
        got = []
        for _ in range(50):
            msg = await sub.next_msg(timeout=10)
            await msg.ack()
            got.append(msg.data)
        await nc.close()
        return got

    assert asyncio.run(run()) == [f"message {i}".encode() for i in range(50)]


def test_a_push_consumer_made_before_its_subscription_starts_when_it_comes(
        gateway, js, stream_name, drop_new_streams, monkeypatch):  # noqa: F811
    # nats.py makes a push consumer, then subscribes to its deliver subject: the SUB wakes
    # the consumer's pump (with the pump's own wait stretched past the test's timeout, a
    # pump that only woke on its own would miss it)
    from rayjet.gateway import pushing
    monkeypatch.setattr(pushing, "NO_INTEREST_WAIT", 60.0)
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    js.publish_batch([(f"{stream_name}.m", f"message {i}".encode()) for i in range(3)])
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        deliver = nc.new_inbox()
        await nc.jetstream().add_consumer(stream_name, durable_name="LATE",
                                          deliver_subject=deliver, ack_policy="none")
        sub = await nc.subscribe("_INBOX.*")  # a wildcard covering it wakes the pump too
        got = [(await sub.next_msg(timeout=10)).data for _ in range(3)]
        await nc.close()
        return got

    assert asyncio.run(run()) == [f"message {i}".encode() for i in range(3)]


def test_step_downs_and_peer_removal_answer_as_nats_server(gateway, js, stream_name,  # noqa: F811
                                                 drop_new_streams):  # noqa: F811
    import json

    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3)
    js.add_consumer(stream_name, durable_name="d", num_replicas=3)
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        api = "$JS.API."

        async def ask(subject, body=b""):
            return json.loads((await nc.request(api + subject, body, timeout=20)).data)

        before = (await ask(f"STREAM.INFO.{stream_name}"))["cluster"]["leader"]
        done = await ask(f"STREAM.LEADER.STEPDOWN.{stream_name}")
        after = (await ask(f"STREAM.INFO.{stream_name}"))["cluster"]["leader"]
        consumer = await ask(f"CONSUMER.LEADER.STEPDOWN.{stream_name}.d")
        meta = await ask("META.LEADER.STEPDOWN")
        missing = await ask(f"STREAM.LEADER.STEPDOWN.{stream_name}X")
        no_consumer = await ask(f"CONSUMER.LEADER.STEPDOWN.{stream_name}.nope")
        with_body = await ask(f"STREAM.LEADER.STEPDOWN.{stream_name}",
                              b'{"placement":{"cluster":"c2"}}')
        follower = (await ask(f"STREAM.INFO.{stream_name}"))["cluster"]["replicas"][0]["name"]
        peer_removed = await ask(f"STREAM.PEER.REMOVE.{stream_name}",
                                 b'{"peer":"%s"}' % follower.encode())
        replicas = (await ask(f"STREAM.INFO.{stream_name}"))["cluster"]
        replaced = follower not in [replicas["leader"], *(r["name"] for r in replicas["replicas"])]
        peer_errors = [(await ask(f"STREAM.PEER.REMOVE.{stream_name}", body))["error"]["err_code"]
                       for body in (b"", b'{"peer":"%s"}' % follower.encode())]
        js_ = nc.jetstream()
        ack = await js_.publish(f"{stream_name}.a", b"after")
        await nc.close()
        return (before, done, after, consumer, meta, missing, no_consumer, with_body, ack,
                peer_removed, replaced, peer_errors)

    (before, done, after, consumer, meta, missing, no_consumer, with_body, ack, peer_removed,
     replaced, peer_errors) = asyncio.run(run())
    assert peer_removed == {"type": "io.nats.jetstream.api.v1.stream_remove_peer_response",
                            "success": True}
    assert replaced and peer_errors == [10003, 10040]
    assert done == {"type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response",
                    "success": True}
    assert after != before
    assert consumer["success"] is True and meta["success"] is True
    assert missing["error"]["err_code"] == 10059
    assert no_consumer["error"]["err_code"] == 10014
    assert with_body["error"]["err_code"] == 10003
    assert ack.seq == 1

    # the CLI's client: the new leader's id, from the stream's and consumer's info
    from rayjet.errors import StreamNotFoundError
    from rayjet.remote import connection, jetstream

    client = jetstream.GatewayJetStream(connection.Requester(f"nats://127.0.0.1:{gw.port}", 20))
    try:
        led = js.stream_info(stream_name).cluster.leader
        moved = client.stream_leader_stepdown(stream_name)
        assert moved not in (None, led) and moved == js.stream_info(stream_name).cluster.leader
        assert client.consumer_leader_stepdown(stream_name, "d") == \
            js.consumer_info(stream_name, "d").cluster.leader
        with pytest.raises(StreamNotFoundError):
            client.stream_leader_stepdown(stream_name + "X")
    finally:
        client.close()


def test_an_idle_gateway_leaves_the_meta_group_quiet(gateway, js):  # noqa: F811
    """The gateway follows the meta leader's catalogue by a long poll answered at each
    change: no leadership round trips, so an idle meta group goes quiet (no heartbeats)
    while a gateway runs, and wakes for the next change, which the gateway sees at once."""
    import ray

    from rayjet.actors.names import META_MEMBERS, NAMESPACE, meta_actor_name, meta_member_id

    gw = gateway()
    members = [ray.get_actor(meta_actor_name(meta_member_id(i)), namespace=NAMESPACE)
               for i in range(META_MEMBERS)]

    def quiet() -> bool:
        return all(st["quiet"] for st in ray.get([m.status.remote() for m in members]))

    deadline = time.monotonic() + 30
    while not quiet():  # quiet after 1 s without work
        assert time.monotonic() < deadline, "the meta group never went quiet"
        time.sleep(0.2)
    # and stays quiet while the gateway follows the catalogue: the meta leader's own orphan
    # collection (a linearizable read, right after it took the lead and then once a minute)
    # may wake it once for a second
    samples = []
    for _ in range(20):
        time.sleep(0.25)
        samples.append(quiet())
    assert sum(samples) >= 10, samples
    # a change still goes through (and the gateway sees it)
    js.add_stream(name="QUIETMETA", subjects=["quietmeta.>"])
    try:
        async def publish():
            nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
            ack = await nc.jetstream().publish("quietmeta.x", b"hi")
            await nc.close()
            return ack.seq
        assert asyncio.run(publish()) == 1
    finally:
        js.delete_stream("QUIETMETA")




def test_stopping_ends_a_catalogue_recheck_in_flight(gateway, js, monkeypatch):  # noqa: F811
    """A publish nothing captures makes the bridge read the catalogue again in a task of its
    own; stopping the gateway while that read is in flight ends the task with the others
    (none is left pending for the closed loop to destroy)."""
    import threading

    gw = gateway()
    entered = threading.Event()
    real = js.watch_stream_changes

    async def slow(since, timeout, *, linearizable=False):
        if linearizable:  # the recheck's read (following the catalogue is not linearizable)
            entered.set()
            await asyncio.Event().wait()  # in flight until the gateway's stop ends it
        return await real(since, timeout, linearizable=linearizable)

    monkeypatch.setattr(js, "watch_stream_changes", slow)

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        deadline = time.monotonic() + 30
        while not entered.is_set():  # a catalogue older than the recheck age is read again
            assert time.monotonic() < deadline, "no recheck started"
            await nc.publish("uncaptured.subject", b"x")
            await nc.flush()
            await asyncio.sleep(0.05)
        await nc.close()

    asyncio.run(run())
    loop = gw._loop
    gw.stop()
    assert loop.is_closed()
    assert [t for t in asyncio.all_tasks(loop) if not t.done()] == []


def test_api_errors_carry_nats_servers_fixed_texts(gateway, js, stream_name,  # noqa: F811
                                                   drop_new_streams):  # noqa: F811
    """Clients match on some descriptions: the JavaScript client creates a KV bucket or an
    object store only when its stream's info answers exactly "stream not found"."""
    import json

    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")

        async def ask(subject, body=b""):
            msg = await nc.request("$JS.API." + subject, body, timeout=20)
            return json.loads(msg.data)["error"]

        try:
            return (await ask("STREAM.INFO.KV_nope"),
                    await ask(f"CONSUMER.INFO.{stream_name}.nope"),
                    await ask(f"STREAM.MSG.GET.{stream_name}", b'{"seq": 7}'))
        finally:
            await nc.close()

    stream, consumer, message = asyncio.run(run())
    assert stream == {"code": 404, "err_code": 10059, "description": "stream not found"}
    assert consumer == {"code": 404, "err_code": 10014, "description": "consumer not found"}
    assert message == {"code": 404, "err_code": 10037, "description": "no message found"}


def test_a_request_nobody_answers_gets_nats_servers_503_naming_its_subject(gateway):
    """The no-responders status is byte for byte nats-server's: ``NATS/1.0 503`` with the
    request's subject in ``Nats-Subject``."""
    from benchmarks.natsbase import NatsServer

    request = (b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\n'
               b"SUB _INBOX.probe 1\r\nPUB nobody.home _INBOX.probe 1\r\n?\r\nPING\r\n")

    def answer(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.recv(4096)  # INFO
            s.sendall(request)
            out = b""
            # the gateway may answer after its PONG: it first looks for a stream made
            # meanwhile that would capture the request
            while b"PONG\r\n" not in out or b"\r\n\r\n\r\n" not in out:
                chunk = s.recv(4096)
                assert chunk, out
                out += chunk
        start = out.index(b"HMSG")
        return out[start:out.index(b"\r\n\r\n\r\n", start) + 6]

    ours = answer(gateway().port)
    with NatsServer() as ns:
        theirs = answer(ns.port)
    assert ours == theirs == (b"HMSG _INBOX.probe 1 43 43\r\n"
                              b"NATS/1.0 503\r\nNats-Subject: nobody.home\r\n\r\n\r\n")


def test_reply_subjects_pass_as_they_come_and_bad_subjects_are_refused(gateway):
    """As nats-server 2.15.1 (checked on the wire): a reply subject is never checked, pedantic
    or not; a publish subject with an empty token gets -ERR and the connection goes on."""
    gw = gateway()
    data = (b'CONNECT {"verbose":false}\r\nSUB a.> 1\r\nPUB a.b .$FI 1\r\nx\r\n'
            b'PUB a..b 1\r\ny\r\nPUB a.c bad..reply 1\r\nz\r\nPING\r\n')
    out = asyncio.run(_raw(gw.port, data))
    assert out.startswith(b"MSG a.b 1 .$FI 1\r\nx\r\n-ERR 'Invalid Publish Subject'\r\n"
                          b"MSG a.c 1 bad..reply 1\r\nz\r\nPONG\r\n"), out
