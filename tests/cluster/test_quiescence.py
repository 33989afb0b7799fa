"""Idle stream groups go quiet (no ticks, no heartbeats); a quiet group still notices a dead
leader (Ray reports the actor's death to the followers waiting on it) and wakes for any
write."""

from __future__ import annotations

import time

import ray

from rayjet import StorageType
from tests.cluster.test_faults import leader_id, replica_handles, wait_replicas_equal
from tests.replicas import kill, pid


def statuses(js, name):
    return {rid: ray.get(h.status.remote(), timeout=30)
            for rid, h in replica_handles(js, name).items()}


def wait_quiet(js, name, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        sts = statuses(js, name)
        if all(st["quiet"] for st in sts.values()):
            return sts
        assert time.monotonic() < deadline, {r: (st["role"], st["quiet"]) for r, st in sts.items()}
        time.sleep(0.2)


def sent(sts):
    return sum(st["transport"].get("sent", 0) for st in sts.values())


def publish_retrying(js, subject, data, msg_id, timeout=60):
    """Publish with a Nats-Msg-Id until acked (a leader change in between is retried)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return js.publish(subject, data, headers={"Nats-Msg-Id": msg_id}, timeout=10)
        except Exception:  # noqa: BLE001 - electing: try again
            assert time.monotonic() < deadline, "no leader took the publish"
            time.sleep(0.1)


def quiet_stream(js, name, count):
    """An R3 file stream holding ``count`` messages (ids m0..), its group gone quiet."""
    js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=3, storage=StorageType.FILE)
    for i in range(count):
        js.publish(f"{name}.a", b"%d" % i, headers={"Nats-Msg-Id": f"m{i}"})
    return wait_quiet(js, name)


def test_an_idle_group_goes_quiet_and_sends_nothing(js, stream_name, drop_new_streams):
    name = stream_name
    before = quiet_stream(js, name, 5)
    time.sleep(2.0)  # forty ticks of an awake group: heartbeats would have gone out
    after = statuses(js, name)
    assert sent(after) == sent(before)
    assert all(st["quiet"] for st in after.values())
    # a write wakes it, commits on every replica, and the group goes quiet again
    ack = js.publish(f"{name}.a", b"wake")
    assert ack.seq == 6
    wait_replicas_equal(js, name, 6)
    wait_quiet(js, name)


def test_a_quiet_group_expires_messages_on_time_then_sleeps(js, stream_name,
                                                            drop_new_streams):
    """Each replica expires by its own clock, so a quiet group drops aged messages with no
    raft traffic; afterwards nothing is due and an idle replica's upkeep stops running."""
    name = stream_name
    js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=3, storage=StorageType.FILE,
                  max_age=2.0, duplicate_window=1.0)
    for i in range(3):
        js.publish(f"{name}.a", b"%d" % i, headers={"Nats-Msg-Id": f"m{i}"})
    quiet = wait_quiet(js, name)
    deadline = time.monotonic() + 30
    while True:
        sts = statuses(js, name)
        if all(st["messages"] == 0 for st in sts.values()):
            break
        assert time.monotonic() < deadline, {r: st["messages"] for r, st in sts.items()}
        time.sleep(0.2)
    assert sent(sts) == sent(quiet)  # expired while quiet
    time.sleep(3.0)  # three upkeep periods of a replica that polls
    later = statuses(js, name)
    assert {r: later[r]["upkeep_passes"] - sts[r]["upkeep_passes"] for r in sts} == \
        {r: 0 for r in sts}, "an idle replica kept running its upkeep"


def test_a_quiet_group_replaces_its_killed_leader(js, stream_name, drop_new_streams):
    name = stream_name
    quiet_stream(js, name, 5)
    old = leader_id(js, name)
    kill(replica_handles(js, name)[old])
    ack = publish_retrying(js, f"{name}.a", b"after", "after")
    assert ack.seq == 6
    wait_replicas_equal(js, name, 6)


def test_a_quiet_groups_killed_follower_catches_up(js, stream_name, drop_new_streams):
    name = stream_name
    quiet_stream(js, name, 5)
    lead = leader_id(js, name)
    follower = next(r for r in replica_handles(js, name) if r != lead)
    handle = replica_handles(js, name)[follower]
    kill(handle)
    for i in range(5, 10):
        publish_retrying(js, f"{name}.a", b"%d" % i, f"n{i}")
    deadline = time.monotonic() + 60
    while True:  # Ray restarts it (its __init__ runs again over its disk)
        try:
            ray.get(handle.ping.remote(), timeout=10)
            break
        except Exception:  # noqa: BLE001 - still restarting
            assert time.monotonic() < deadline, "the follower was not restarted"
            time.sleep(0.2)
    wait_replicas_equal(js, name, 10)
    wait_quiet(js, name)


def test_a_quiet_group_whose_leader_is_paused_elects_another(js, stream_name,
                                                              drop_new_streams):
    """SIGSTOP is no death Ray reports: the client's requests to the followers wake them,
    and a leader that does not answer is replaced."""
    import os
    import signal

    name = stream_name
    quiet_stream(js, name, 3)
    lead = leader_id(js, name)
    handle = replica_handles(js, name)[lead]
    paused = pid(handle)
    os.kill(paused, signal.SIGSTOP)
    try:
        ack = publish_retrying(js, f"{name}.a", b"while paused", "paused", timeout=90)
        assert ack.seq == 4
        others = {r: h for r, h in replica_handles(js, name).items() if r != lead}
        roles = {r: ray.get(h.status.remote(), timeout=30)["role"] for r, h in others.items()}
        assert "Leader" in roles.values(), roles
    finally:
        os.kill(paused, signal.SIGCONT)
    wait_replicas_equal(js, name, 4)


def test_an_idle_push_consumer_waits_at_its_stream_instead_of_polling(js, stream_name,
                                                                       drop_new_streams):
    """A push subscription with nothing to deliver waits at the stream leader for the next
    message (one read per poll of the subscriber at most), and the message it waited for
    comes at once."""
    name = stream_name
    js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=3, storage=StorageType.FILE)
    js.publish(f"{name}.a", b"first")
    sub = js.subscribe(stream=name, durable="P")
    assert sub.next_msg(timeout=20).data == b"first"
    lead = leader_id(js, name)
    handle = replica_handles(js, name)[lead]
    before = ray.get(handle.status.remote(), timeout=30)["reads_served"]
    time.sleep(3.0)  # three polls of the subscriber; sixty were it polling every 50 ms
    after = ray.get(handle.status.remote(), timeout=30)["reads_served"]
    assert after - before <= 12, f"{after - before} reads while idle"
    js.publish(f"{name}.a", b"second")
    assert sub.next_msg(timeout=20).data == b"second"
    sub.unsubscribe()


def test_a_waiting_pull_request_reads_the_stream_only_when_it_grew(js, stream_name,
                                                                   drop_new_streams):
    """A pull request waiting for messages costs no stream read per timer round: the
    consumer keeps a wait open at the stream's leader and reads once it says the stream
    grew; the message published while the request waits reaches it."""
    import threading

    name = stream_name
    js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=3, storage=StorageType.FILE)
    js.publish(f"{name}.a", b"first")
    sub = js.pull_subscribe(durable="Q", stream=name)
    assert [m.data for m in sub.fetch(1, timeout=20)] == [b"first"]
    handle = replica_handles(js, name)[leader_id(js, name)]
    before = ray.get(handle.status.remote(), timeout=30)["reads_served"]
    got: list = []
    waiting = threading.Thread(target=lambda: got.extend(sub.fetch(1, timeout=8)))
    waiting.start()
    time.sleep(3.0)  # sixty timer rounds of the consumer while the request waits
    during = ray.get(handle.status.remote(), timeout=30)["reads_served"] - before
    js.publish(f"{name}.a", b"second")
    waiting.join(30)
    assert [m.data for m in got] == [b"second"]
    assert during <= 12, f"{during} stream reads while the request waited"
