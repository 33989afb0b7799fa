"""Consumers on real actors: the seed walkthrough, ack kinds, work queues, push and ordered
subscriptions, and consumer actors killed mid-stream."""

from __future__ import annotations

import threading
import time

import pytest
import ray

from rayjet import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StorageType
from rayjet.errors import BadRequestError, ConsumerNotFoundError, NoMessagesError
from tests.replicas import consumer_replicas, kill, pid, stream_replicas


def row(info):
    return (f"{info.delivered.consumer_seq}/{info.delivered.stream_seq}",
            f"{info.ack_floor.consumer_seq}/{info.ack_floor.stream_seq}",
            info.num_ack_pending, info.num_redelivered, info.num_pending)


@pytest.fixture
def orders(js, stream_name):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.*"], storage=StorageType.FILE)
    yield stream_name
    js.delete_stream(stream_name)


def test_seed_walkthrough_dispatch(js, orders):
    s = orders
    js.add_consumer(s, durable_name="DISPATCH", ack_policy=AckPolicy.EXPLICIT, ack_wait=1.0,
                    filter_subject=f"{s}.processed")
    sub = js.pull_subscribe(f"{s}.processed", durable="DISPATCH", stream=s)
    assert row(js.consumer_info(s, "DISPATCH")) == ("0/0", "0/0", 0, 0, 0)

    js.publish(f"{s}.processed", b"order 4")
    [m] = sub.fetch(1, timeout=5)
    assert m.data == b"order 4" and m.metadata.num_delivered == 1
    m.ack_sync()
    assert row(js.consumer_info(s, "DISPATCH")) == ("1/1", "1/1", 0, 0, 0)

    js.publish(f"{s}.processed", b"order 5")
    [m] = sub.fetch(1, timeout=5)
    assert (m.data, m.metadata.sequence.stream, m.metadata.sequence.consumer) == (
        b"order 5", 2, 2)
    assert row(js.consumer_info(s, "DISPATCH")) == ("2/2", "1/1", 1, 0, 0)

    # not acked: after ack_wait it comes again
    [m] = sub.fetch(1, timeout=10)
    assert (m.metadata.sequence.consumer, m.metadata.num_delivered) == (3, 2)
    assert m.reply.startswith(f"$JS.ACK.{s}.DISPATCH.2.2.3.")
    assert row(js.consumer_info(s, "DISPATCH")) == ("3/2", "1/1", 1, 1, 0)

    [m] = sub.fetch(1, timeout=10)
    assert (m.metadata.sequence.consumer, m.metadata.num_delivered) == (4, 3)
    m.ack_sync()
    assert row(js.consumer_info(s, "DISPATCH")) == ("4/2", "4/2", 0, 0, 0)
    with pytest.raises(NoMessagesError):
        sub.fetch(1, timeout=0.5)
    sub.unsubscribe()


def test_fetch_batches_acks_and_nak_term(js, orders):
    s = orders
    js.publish_batch([(f"{s}.a", b"%d" % i) for i in range(20)])
    sub = js.pull_subscribe(f"{s}.a", durable="WORK", stream=s, ack_wait=30.0)
    msgs = sub.fetch(10, timeout=5)
    assert [m.data for m in msgs] == [b"%d" % i for i in range(10)]
    for m in msgs[:8]:
        m.ack()
    msgs[8].nak()
    msgs[9].term("bad payload")
    with pytest.raises(BadRequestError):
        msgs[0].ack()  # answered once
    rest = sub.fetch(20, timeout=5)
    assert [m.data for m in rest][0] == b"8"  # the nak'ed one comes back first
    assert b"9" not in [m.data for m in rest]  # the terminated one never does
    for m in rest:
        m.ack_sync()
    info = sub.consumer_info()
    assert info.num_ack_pending == 0 and info.num_pending == 0
    sub.unsubscribe()
    assert "WORK" in js.consumer_names(s)  # durable: stays


def test_abandoned_fetch_takes_no_messages(js, orders):
    """nats-server 2.15.1 (nats-py): with max_ack_pending=3, fetch(10) gets 1-3, a second
    fetch times out, and after two acks a third fetch gets 4 and 5; the pulls the client
    gave up on take nothing."""
    s = orders
    js.publish_batch([(f"{s}.a", b"%d" % i) for i in range(1, 11)])
    sub = js.pull_subscribe(f"{s}.a", durable="CAPPED", stream=s, ack_wait=30.0,
                            max_ack_pending=3)
    first = sub.fetch(10, timeout=1.0)
    assert [m.metadata.sequence.stream for m in first] == [1, 2, 3]
    with pytest.raises(NoMessagesError):
        sub.fetch(10, timeout=1.0)
    info = sub.consumer_info()
    assert row(info) == ("3/3", "0/0", 3, 0, 7) and info.num_waiting == 0
    first[0].ack_sync()
    first[1].ack_sync()
    info = sub.consumer_info()
    assert row(info) == ("3/3", "2/2", 1, 0, 7) and info.num_waiting == 0
    third = sub.fetch(10, timeout=1.0)
    assert [m.metadata.sequence.stream for m in third] == [4, 5]
    assert [m.metadata.num_delivered for m in third] == [1, 1]
    info = sub.consumer_info()
    assert row(info) == ("5/5", "2/2", 3, 0, 5) and info.num_waiting == 0
    sub.unsubscribe()


def test_work_queue_workers_share_messages_and_stream_ends_empty(js, stream_name):
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.*"], retention=RetentionPolicy.WORK_QUEUE,
                  storage=StorageType.MEMORY)
    try:
        js.add_consumer(s, durable_name="Q", ack_policy=AckPolicy.EXPLICIT)
        with pytest.raises(Exception) as err:
            js.add_consumer(s, durable_name="Q2", ack_policy=AckPolicy.EXPLICIT)
        assert err.value.err_code == 10099
        js.publish_batch([(f"{s}.job", b"%d" % i) for i in range(200)])
        got: list[bytes] = []
        lock = threading.Lock()

        def worker():
            sub = js.pull_subscribe(durable="Q", stream=s)
            while True:
                try:
                    batch = sub.fetch(7, timeout=1.5)
                except NoMessagesError:
                    break
                for m in batch:
                    with lock:
                        got.append(m.data)
                    m.ack_sync()
            sub.unsubscribe()

        threads = [threading.Thread(target=worker) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert sorted(got) == sorted(b"%d" % i for i in range(200))  # each exactly once
        deadline = time.monotonic() + 20
        while js.stream_info(s).state.messages and time.monotonic() < deadline:
            time.sleep(0.1)
        assert js.stream_info(s).state.messages == 0
    finally:
        js.delete_stream(s)


def test_push_subscription_and_deliver_group(js, orders):
    s = orders
    js.publish_batch([(f"{s}.p", b"%d" % i) for i in range(30)])
    a = js.subscribe(f"{s}.p", stream=s, queue="grp")
    b = js.subscribe(f"{s}.p", stream=s, queue="grp")
    seen = []
    for sub in (a, b):
        for m in sub.messages(timeout=2.0):
            seen.append(m.data)
            m.ack()
    assert sorted(seen) == sorted(b"%d" % i for i in range(30))
    a.unsubscribe()
    b.unsubscribe()


def test_ordered_consumer_sees_every_message_once_in_order(js, orders):
    s = orders
    js.publish_batch([(f"{s}.o", b"%d" % i) for i in range(50)])
    sub = js.subscribe(f"{s}.o", stream=s, ordered_consumer=True,
                       deliver_policy=DeliverPolicy.ALL)
    # ack none: max_ack_pending stays unset, as nats-server reports it
    assert js.consumer_info(s, sub.name).config.max_ack_pending is None
    got = [m.data for m in sub.messages(timeout=2.0)]
    # delete its consumer under it: it re-creates one and goes on after the last message
    js.delete_consumer(s, sub.name)
    js.publish_batch([(f"{s}.o", b"%d" % i) for i in range(50, 60)])
    got += [sub.next_msg(timeout=15).data for _ in range(10)]
    assert got == [b"%d" % i for i in range(60)]
    with pytest.raises(TimeoutError):  # and nothing twice
        sub.next_msg(timeout=1.0)
    sub.unsubscribe()


def test_consumer_actor_killed_mid_stream_loses_no_ack(js, orders):
    s = orders
    js.publish_batch([(f"{s}.k", b"%d" % i) for i in range(40)])
    sub = js.pull_subscribe(f"{s}.k", durable="KILLME", stream=s, ack_wait=2.0)
    acked = set()
    for m in sub.fetch(20, timeout=5):
        m.ack_sync()
        acked.add(m.data)
    for handle in consumer_replicas(js, s, "KILLME").values():
        kill(handle)
    rest = []
    deadline = time.monotonic() + 60
    while len(rest) < 20 and time.monotonic() < deadline:
        try:
            batch = sub.fetch(20, timeout=2)
        except (NoMessagesError, Exception):
            continue
        for m in batch:
            rest.append(m.data)
            m.ack_sync()
    assert not acked & set(rest), "a message acked with ack_sync came back"
    assert acked | set(rest) == {b"%d" % i for i in range(40)}, "an unacked message was lost"
    sub.unsubscribe()


def test_advance_consumer_survives_killed_replicas(js, stream_name):
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.*"], num_replicas=3)
    js.publish_batch([(f"{s}.{'a' if i % 3 else 'b'}", b"%d" % i) for i in range(1, 3001)])
    js.add_consumer(s, durable_name="CURSOR", ack_policy=AckPolicy.ALL, filter_subject=f"{s}.a")
    info = js.advance_consumer(s, "CURSOR", 2500)
    # 1667 of the first 2500 sequences are on .a (those not divisible by 3)
    assert row(info) == ("1667/2500", "1667/2500", 0, 0, 333)
    for handle in consumer_replicas(js, s, "CURSOR").values():
        kill(handle)
    # wait for the consumer by its info, not by pulls: a pull that timed out here while the
    # replicas restarted could still be served, its message pending with nobody to read it
    deadline = time.monotonic() + 60
    while True:
        try:
            info = js.consumer_info(s, "CURSOR")
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
    assert row(info) == ("1667/2500", "1667/2500", 0, 0, 333)
    sub = js.pull_subscribe(f"{s}.a", durable="CURSOR", stream=s)
    [m] = sub.fetch(1, timeout=30)
    got = (m.metadata.sequence.stream, m.metadata.sequence.consumer)
    if got != (2501, 1668):
        # the restarted replicas may still be electing: a delivery decided by a leader that
        # lost its leadership before answering stays pending (redelivered after ack_wait,
        # as in nats-server), and the next one follows it
        assert got == (2503, 1669), got
        assert js.consumer_info(s, "CURSOR").ack_floor.stream_seq == 2500
    with pytest.raises(BadRequestError) as err:
        js.advance_consumer(s, "CURSOR", 99_999)
    assert err.value.err_code == 10003
    for bad in ("10", 0, True, 2.5):
        with pytest.raises(BadRequestError):
            js.advance_consumer(s, "CURSOR", bad)
    js.add_consumer(s, durable_name="EXPLICIT", ack_policy=AckPolicy.EXPLICIT)
    with pytest.raises(BadRequestError):
        js.advance_consumer(s, "EXPLICIT", 10)
    sub.unsubscribe()
    js.delete_stream(s)


def test_consumer_errors(js, orders):
    with pytest.raises(ConsumerNotFoundError) as err:
        js.consumer_info(orders, "NOPE")
    assert err.value.err_code == 10014
    with pytest.raises(Exception) as err:
        js.add_consumer(orders, ConsumerConfig(durable_name="bad.name"))
    assert err.value.err_code in (10103, 10052)


def test_replay_original_keeps_the_publish_spacing(js, orders):
    s = orders
    js.publish(f"{s}.r", b"first")
    time.sleep(0.6)  # the spacing under test, not a synchronisation
    js.publish(f"{s}.r", b"second")
    from rayjet import ReplayPolicy

    sub = js.subscribe(f"{s}.r", stream=s, durable="REPLAY",
                       replay_policy=ReplayPolicy.ORIGINAL, deliver_policy=DeliverPolicy.ALL)
    first = sub.next_msg(timeout=10)
    t1 = time.monotonic()
    second = sub.next_msg(timeout=10)
    gap = time.monotonic() - t1
    assert (first.data, second.data) == (b"first", b"second")
    assert gap >= 0.4, f"replayed {gap:.2f}s apart; published 0.6s apart"
    sub.unsubscribe()


def test_max_deliveries_and_terminated_advisories(js, orders):
    s = orders
    js.publish(f"{s}.adv", b"poison")
    js.publish(f"{s}.adv", b"bad")
    sub = js.pull_subscribe(f"{s}.adv", durable="ADV", stream=s, ack_wait=0.5, max_deliver=2,
                            sample_freq="100%")
    first = sub.fetch(2, timeout=5)
    first[1].term("cannot parse")
    again = sub.fetch(1, timeout=10)  # the unacked one, delivered a second (last) time
    assert again[0].data == b"poison" and again[0].metadata.num_delivered == 2
    # past its ack wait it is queued once more, and the next pull ends it (as nats-server)
    time.sleep(1.0)
    with pytest.raises(NoMessagesError):
        sub.fetch(1, timeout=1)
    deadline = time.monotonic() + 20
    kinds: set[str] = set()
    while time.monotonic() < deadline and not {"MAX_DELIVERIES", "MSG_TERMINATED"} <= kinds:
        for subject, body in js.consumer_advisories(s, "ADV"):
            kinds.add(subject.split(".")[4])
            assert body["stream"] == s and body["consumer"] == "ADV"
        time.sleep(0.2)
    assert {"MAX_DELIVERIES", "MSG_TERMINATED"} <= kinds
    sub.unsubscribe()


def test_push_flow_control_holds_delivery_until_the_reader_catches_up(js, orders):
    s = orders
    js.publish_batch([(f"{s}.f", b"%d" % i) for i in range(1000)])
    sub = js.subscribe(f"{s}.f", stream=s, ordered_consumer=True, pending_msgs_limit=100)

    def delivered():
        return js.consumer_info(s, sub.name).delivered.stream_seq

    deadline = time.monotonic() + 30
    while sub.pending() < 100 and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the condition, with a deadline
    assert sub.pending() == 100
    # the reader took nothing: the consumer handed out only what fits (a subscription
    # without flow control polls 256 at once)
    assert delivered() == 100
    got = [int(sub.next_msg(timeout=5).data) for _ in range(1000)]
    assert got == list(range(1000))
    with pytest.raises(TimeoutError):
        sub.next_msg(timeout=0.5)
    assert delivered() == 1000
    sub.unsubscribe()
    with pytest.raises(BadRequestError):
        js.subscribe(f"{s}.f", stream=s, ordered_consumer=True, pending_msgs_limit=0)


def test_pulls_that_arrive_together_are_served_from_the_read_ahead(js, stream_name):
    """Each decision reads the stream's leader (another process) ahead of time, off the
    event loop; pulls that come together move the read position while another's read is
    out, and a decision on a window that starts too early would read the rest by blocking
    calls on the consumer's event loop (the JavaScript client's consume() met this on
    every pull)."""
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.*"], storage=StorageType.FILE,
                  hosting="shared", num_replicas=3)
    js.publish_batch([(f"{stream_name}.a", b"%d" % i) for i in range(2000)])
    name = "C"
    js.add_consumer(stream_name, durable_name=name, ack_policy=AckPolicy.EXPLICIT)
    # a consumer replica runs in its stream replica's host; their leaders are elected
    # apart: step the consumer's down until it leads in another process than the stream's
    stream_leader = stream_replicas(js, stream_name)[js.stream_info(stream_name).cluster.leader]
    consumers = consumer_replicas(js, stream_name, name)
    handle = None
    for _ in range(12):
        leader = consumers[js.consumer_info(stream_name, name).cluster.leader]
        if pid(leader) != pid(stream_leader):
            handle = leader
            break
        js.consumer_leader_stepdown(stream_name, name)
    assert handle is not None, "the consumer always led in its stream leader's process"
    sub = js.pull_subscribe(f"{stream_name}.a", durable=name, stream=stream_name)
    got: list[int] = []
    fetches = [0]
    lock = threading.Lock()

    def puller():
        while True:
            with lock:
                if len(got) >= 2000:
                    return
            try:
                msgs = sub.fetch(50, timeout=5)
            except NoMessagesError:
                continue
            for m in msgs:
                m.ack()
            with lock:
                fetches[0] += 1
                got.extend(m.metadata.sequence.stream for m in msgs)

    threads = [threading.Thread(target=puller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(got) == list(range(1, 2001))  # each message once
    blocking = ray.get(handle.status.remote(), timeout=30)["blocking_reads"]
    # a read now and then still misses (a decision past even a second read); before, every
    # pull that met another missed two or three reads
    assert blocking <= fetches[0] // 2, (blocking, fetches[0])
    js.delete_stream(stream_name)


def test_many_consumer_infos_side_by_side(js, stream_name):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.*"], storage=StorageType.MEMORY)
    try:
        for i in range(3):
            js.publish(f"{stream_name}.a", b"%d" % i)
        names = [f"D{i}" for i in range(12)]
        for i, name in enumerate(names):
            js.add_consumer(stream_name, durable_name=name, ack_policy=AckPolicy.EXPLICIT,
                            deliver_policy=DeliverPolicy.ALL if i % 2 else DeliverPolicy.NEW)
        infos = js.consumer_infos(stream_name, [*names, "GONE"])
        assert list(infos) == [*names, "GONE"]
        assert isinstance(infos["GONE"], ConsumerNotFoundError)
        assert [infos[n].num_pending for n in names] == [0, 3] * 6
        assert sorted(i.name for i in js.consumers_info(stream_name)) == sorted(names)
    finally:
        js.delete_stream(stream_name)
