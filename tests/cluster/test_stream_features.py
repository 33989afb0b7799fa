"""Stream features that need the replica actors' own upkeep (TTL, schedules), direct gets
served by followers, counters, and the write guards (sealed, deny_delete, deny_purge)."""

from __future__ import annotations

import pytest
import ray

from rayjet import StorageType, StreamConfig
from rayjet.errors import APIError, NotFoundError, StreamSealedError
from tests.cluster.test_faults import leader_id, replica_handles
from tests.replicas import kill
from tests.waiting import wait_for


@pytest.fixture
def make(js, stream_name):
    made = []

    def factory(**kw):
        if kw.get("subjects", ...) is None:
            kw["subjects"] = [f"{stream_name}.in.>"]
        kw.setdefault("subjects", [f"{stream_name}.>"])
        kw.setdefault("storage", StorageType.MEMORY)
        info = js.add_stream(name=stream_name, **kw)
        made.append(stream_name)
        return info.config

    yield factory
    for name in made:
        js.delete_stream(name)


def test_per_message_ttl_expires_on_every_replica(js, make):
    cfg = make(allow_msg_ttl=True, num_replicas=3)
    s = cfg.name
    js.publish(f"{s}.short", b"bye", headers={"Nats-TTL": "1s"})
    js.publish(f"{s}.long", b"stay")

    def gone_everywhere():
        for h in replica_handles(js, s).values():
            got = ray.get(h.read_range.remote(1, 2), timeout=30)
            if got["data"] != [b"stay"]:
                return False
        return True

    wait_for(gone_everywhere, 20, what="the TTL message to expire on all replicas")
    assert js.stream_info(s).state.messages == 1


def test_at_schedule_fires_from_the_leader(js, make):
    cfg = make(allow_msg_schedules=True)
    s = cfg.name
    from datetime import UTC, datetime, timedelta

    at = (datetime.now(tz=UTC) + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    js.publish(f"{s}.sched", b"payload", headers={
        "Nats-Schedule": f"@at {at}", "Nats-Schedule-Target": f"{s}.out"})

    def fired():
        try:
            return js.get_msg(s, last_by_subject=f"{s}.out").data == b"payload"
        except NotFoundError:
            return False

    wait_for(fired, 30, what="the scheduled message")


def test_counters_add_up_across_replicas(js, make):
    cfg = make(allow_msg_counter=True, num_replicas=3)
    s = cfg.name
    vals = [js.publish(f"{s}.hits", b"", headers={"Nats-Incr": inc}).val
            for inc in ("5", "+2", "-1")]
    assert vals == ["5", "7", "6"]


def test_followers_answer_direct_gets(js, make):
    cfg = make(allow_direct=True, num_replicas=3)
    s = cfg.name
    js.publish(f"{s}.a", b"hello")
    leader = leader_id(js, s)
    handles = replica_handles(js, s)
    follower = next(rid for rid in handles if rid != leader)

    def follower_has_it():
        try:
            msg = ray.get(handles[follower].get_msg.remote(1, None, None, True), timeout=30)
        except ray.exceptions.RayTaskError:
            return False
        return msg["data"] == b"hello"

    wait_for(follower_has_it, 20, what="the follower to serve a direct get")
    assert js.get_msg(s, last_by_subject=f"{s}.a", direct=True).data == b"hello"


def test_sealed_deny_delete_deny_purge(js, make):
    cfg = make(deny_delete=True, deny_purge=True)
    s = cfg.name
    js.publish(f"{s}.a", b"1")
    with pytest.raises(APIError) as err:
        js.delete_msg(s, 1)
    assert err.value.err_code == 10057
    with pytest.raises(APIError) as err:
        js.purge_stream(s)
    assert err.value.err_code == 10110
    js.update_stream(StreamConfig(**{**cfg.__dict__, "sealed": True}))
    with pytest.raises(StreamSealedError) as err:
        js.publish(f"{s}.a", b"2")
    assert err.value.err_code == 10109
    assert js.stream_info(s).state.messages == 1


def test_subject_transform_on_ingest(js, make):
    cfg = make(subject_transform={"src": "*.in.>", "dest": "{{wildcard(1)}}.stored.>"},
               subjects=None)
    s = cfg.name
    ack = js.publish(f"{s}.in.x", b"v")
    assert js.get_msg(s, ack.seq).subject == f"{s}.stored.x"


def test_republished_messages_reach_a_subscription(js, make, stream_name):
    from rayjet import RePublish

    s = stream_name
    make(subjects=[f"{s}.in.>"], num_replicas=3,
         republish=RePublish(src=f"{s}.in.>", dest=f"{s}.rp.>"))
    js.publish(f"{s}.in.a", b"before")  # published before subscribing: not seen
    sub = js.subscribe_republished(f"{s}.rp.>")
    only_b = js.subscribe_republished(f"{s}.rp.b")
    acks = [js.publish(f"{s}.in.{'a' if i % 2 else 'b'}", b"%d" % i,
                       headers={"X-N": str(i)}) for i in range(10)]
    got = [sub.next_msg(timeout=5) for _ in range(10)]
    assert [m.data for m in got] == [b"%d" % i for i in range(10)]
    assert [m.sequence for m in got] == [a.seq for a in acks]
    first = got[0]
    assert first.subject == f"{s}.rp.b" and first.stream == s
    assert first.headers["X-N"] == "0" and first.headers["Nats-Subject"] == f"{s}.in.b"
    assert [only_b.next_msg(timeout=5).data for _ in range(5)] == [b"%d" % i
                                                                    for i in range(0, 10, 2)]
    with pytest.raises(TimeoutError):  # and nothing else: the rest went out with these
        only_b.next_msg(timeout=0.5)
    # the leader dies: the subscription follows the new one and goes on
    old = leader_id(js, s)
    survivors = {r: h for r, h in replica_handles(js, s).items() if r != old}
    kill(replica_handles(js, s)[old])

    def new_leader() -> bool:
        states = [ray.get(h.status.remote(), timeout=30) for h in survivors.values()]
        return any(st["role"] == "Leader" and st["writable"] for st in states)

    wait_for(new_leader, 20, what="a new leader")
    ack = js.publish(f"{s}.in.c", b"after failover", headers={"Nats-Msg-Id": "c1"})
    m = sub.next_msg(timeout=20)
    assert (m.data, m.sequence) == (b"after failover", ack.seq)
    assert sub.dropped == 0
    sub.unsubscribe()
    only_b.unsubscribe()
    with pytest.raises(NotFoundError):
        js.subscribe_republished("nobody.republishes.here")


def test_republish_subscription_ends_when_its_stream_is_deleted(js, stream_name):
    from rayjet import RePublish
    from rayjet.errors import StreamNotFoundError

    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.in.>"], storage=StorageType.MEMORY,
                  republish=RePublish(src=f"{s}.in.>", dest=f"{s}.rp.>"))
    sub = js.subscribe_republished(f"{s}.rp.>")
    js.publish(f"{s}.in.a", b"one")
    assert sub.next_msg(timeout=10).data == b"one"
    js.delete_stream(s)
    with pytest.raises(StreamNotFoundError):
        sub.next_msg(timeout=30)  # the subscription ends instead of polling forever
    assert sub.streams == []
    sub.unsubscribe()
