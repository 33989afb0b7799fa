"""Work-queue and interest streams under leader changes: every ack reaches the stream.

An R3 stream, durable explicit-ack pull consumers, messages fetched and acked in batches;
mid-way the stream's leader (or the consumer's) is killed, or Ray restarts between the
acks and the check. The stream must end with exactly the messages some consumer did not
ack, and consumer followers hold no acks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import textwrap
import time

import pytest
import ray

from rayjet import AckPolicy, RetentionPolicy, StorageType
from tests.cluster.restart_phases import run_phases
from tests.cluster.test_faults import leader_id, replica_handles
from tests.replicas import consumer_replicas, kill, pid, process_of

N = 300
BATCH = 30
KILL_AFTER = 120  # acks before the kill


def unacked_for(name: str) -> set[int]:
    """Stream seqs consumer ``name`` leaves unacked (different per consumer)."""
    off = 7 if name == "C0" else 23
    return {s for s in range(1, N + 1) if s % 50 == off}


def consumer_handles(js, stream, name):
    return consumer_replicas(js, stream, name)


def consumer_statuses(js, stream, name):
    return {rid: ray.get(h.status.remote(), timeout=30)
            for rid, h in consumer_handles(js, stream, name).items()}


def consumer_leader(js, stream, name):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for rid, st in consumer_statuses(js, stream, name).items():
            if st["role"] == "Leader" and st["writable"]:
                return rid
        time.sleep(0.1)
    raise AssertionError(f"consumer {name} has no leader")


def stream_seqs(js, stream):
    """The seqs the stream's leader holds now."""
    last = js.stream_info(stream).state.last_seq
    rid = leader_id(js, stream)
    got = ray.get(replica_handles(js, stream)[rid].read_range.remote(1, max(last, 1),
                                                                     max_msgs=100_000),
                  timeout=30)
    return set(got["seq"])


def wait_stream_holds(js, stream, expected: set[int], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    held: set[int] | None = None
    count: int | None = None
    error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            count = js.stream_info(stream).state.messages
            if count == len(expected):
                held = stream_seqs(js, stream)
                if held == expected:
                    return
        except Exception as err:  # noqa: BLE001 - a leader is being elected: ask again
            error = err
        time.sleep(0.2)
    with contextlib.suppress(Exception):  # what it holds beyond what was expected, to tell
        held = stream_seqs(js, stream)     # which acks never reached it
        consumers = {c.name: (c.ack_floor.stream_seq, c.num_ack_pending, c.num_pending)
                     for c in js.consumers_info(stream)}
        error = AssertionError(f"held beyond expected: {sorted(held - expected)[:40]}; "
                               f"consumers (ack floor, ack pending, pending): {consumers}")
    raise AssertionError(f"stream holds {sorted(held or [])[:20]}..., expected "
                         f"{sorted(expected)[:20]}... ({len(expected)}); last count {count}, "
                         f"last error {error!r}")


def ack_all_but(js, stream, name, sub, kill=None, sync=False):
    """Fetch and ack every message but ``unacked_for(name)``; ``kill()`` after KILL_AFTER
    acks. Retries fetches (and sync acks) across leader elections."""
    skip = unacked_for(name)
    todo = set(range(1, N + 1)) - skip
    acked = 0
    killed = kill is None
    deadline = time.monotonic() + 120
    while todo:
        assert time.monotonic() < deadline, f"{len(todo)} messages never came"
        try:
            batch = sub.fetch(BATCH, timeout=2)
        except Exception:  # noqa: BLE001 - no messages yet, or a leader election
            continue
        for m in batch:
            seq = m.metadata.sequence.stream
            if seq in skip:
                continue
            # a message acked before comes again when its ack was lost (an async ack is
            # at most once: a consumer leader that steps down before the ack commits loses
            # it, as in nats-server): acked again, as an application would
            try:
                m.ack_sync(timeout=10) if sync else m.ack()
            except Exception:  # noqa: BLE001 - the consumer leader died: it comes back
                continue
            if seq not in todo:
                continue
            todo.discard(seq)
            acked += 1
            if not killed and acked >= KILL_AFTER:
                sub.acks.flush()  # the acks so far reach the consumer first
                kill()
                killed = True
    # the last acks may be lost too: ack what comes again until only the skipped are pending
    sub.acks.flush()
    while js.consumer_info(stream, name).num_ack_pending > len(skip):
        assert time.monotonic() < deadline, "acked messages stay pending"
        try:
            batch = sub.fetch(BATCH, timeout=2)
        except Exception:  # noqa: BLE001 - nothing redelivered yet, or a leader election
            continue
        for m in batch:
            if m.metadata.sequence.stream not in skip:
                m.ack()
        sub.acks.flush()


def make_stream(js, s, retention):
    js.add_stream(name=s, subjects=[f"{s}.*"], num_replicas=3, retention=retention,
                  storage=StorageType.FILE)
    names = ["C0"] if retention is RetentionPolicy.WORK_QUEUE else ["C0", "C1"]
    for name in names:
        js.add_consumer(s, durable_name=name, ack_policy=AckPolicy.EXPLICIT, ack_wait=3.0)
    js.publish_batch([(f"{s}.job", b"%d" % i) for i in range(N)])
    return names


@pytest.mark.parametrize("fault", ["stream_leader", "consumer_leader"])
@pytest.mark.parametrize("retention", [RetentionPolicy.WORK_QUEUE, RetentionPolicy.INTEREST],
                         ids=["workqueue", "interest"])
def test_acks_reach_the_stream_across_leader_kills(js, stream_name, retention, fault):
    s = stream_name
    names = make_stream(js, s, retention)
    try:
        expected: set[int] = set()
        for name in names:
            expected |= unacked_for(name)
            sub = js.pull_subscribe(durable=name, stream=s)

            def kill_leader(name=name):
                if fault == "stream_leader":
                    victim = replica_handles(js, s)[leader_id(js, s)]
                else:
                    victim = consumer_handles(js, s, name)[consumer_leader(js, s, name)]
                kill(victim)

            ack_all_but(js, s, name, sub, kill=kill_leader, sync=fault == "consumer_leader")
            sub.unsubscribe()
        wait_stream_holds(js, s, expected)
    finally:
        js.delete_stream(s)


def test_consumer_followers_hold_no_acks(js, stream_name):
    s = stream_name
    make_stream(js, s, RetentionPolicy.WORK_QUEUE)
    try:
        sub = js.pull_subscribe(durable="C0", stream=s)
        ack_all_but(js, s, "C0", sub)
        sub.unsubscribe()
        wait_stream_holds(js, s, unacked_for("C0"))
        leader = consumer_leader(js, s, "C0")
        outboxes = {rid: st["ack_outbox"] for rid, st in consumer_statuses(js, s, "C0").items()}
        assert len(outboxes) == 3
        assert all(n == 0 for rid, n in outboxes.items() if rid != leader), outboxes
        assert outboxes[leader] == 0  # everything confirmed by the stream
    finally:
        js.delete_stream(s)


def test_consumer_answers_while_its_stream_leader_is_paused(js, stream_name):
    s = stream_name
    make_stream(js, s, RetentionPolicy.WORK_QUEUE)
    paused = None
    try:
        sub = js.pull_subscribe(durable="C0", stream=s)
        [m] = sub.fetch(1, timeout=5)
        js.consumer_info(s, "C0")  # a pending count to fall back on
        handle = replica_handles(js, s)[leader_id(js, s)]
        # consumer replicas sharing the paused process (a replica host) pause with it
        chandles = {rid: h for rid, h in consumer_handles(js, s, "C0").items()
                    if process_of(h) != process_of(handle)}
        cleader = chandles.get(consumer_leader(js, s, "C0"))
        if cleader is None:
            pytest.skip("the consumer's leader shares the stream leader's replica host")
        paused = pid(handle, timeout=10)
        os.kill(paused, signal.SIGSTOP)
        m.ack()  # its forward to the paused stream leader waits
        sub.acks.flush()
        t0 = time.monotonic()
        worst = 0.0
        infos = []
        while time.monotonic() - t0 < 4.0:
            infos.append(cleader.info.remote())  # reads the paused stream leader
            for h in chandles.values():
                start = time.monotonic()
                ray.get(h.status.remote(), timeout=5)
                worst = max(worst, time.monotonic() - start)
            time.sleep(0.1)
        assert worst < 1.0, f"a consumer replica took {worst:.2f}s to answer"
        done, _ = ray.wait(infos, num_returns=len(infos), timeout=10)
        assert len(done) == len(infos)  # each answered (from the last pending count)
        assert ray.get(infos[-1])["ack_floor"]["stream_seq"] == 1
    finally:
        if paused is not None:
            os.kill(paused, signal.SIGCONT)
        js.delete_stream(s)


RESTART_SCRIPT = textwrap.dedent("""
    import sys, time, ray, rayjet
    from rayjet import AckPolicy, RetentionPolicy, StorageType
    data_dir, phase = sys.argv[1], sys.argv[2]
    # a Ray of its own (others may run on this machine), shut down when the phase ends
    ray.init(address="local", num_cpus=2, namespace="rayjet", log_to_driver=False,
             include_dashboard=False)
    N = 300
    unacked = {"C0": {s for s in range(1, N + 1) if s % 50 == 7},
               "C1": {s for s in range(1, N + 1) if s % 50 == 23}}
    # one stream of each retention that acks remove messages from
    streams = {"JOBS_WQ": ("workqueue", ["C0"]), "JOBS_INT": ("interest", ["C0", "C1"])}
    with rayjet.connect(data_dir=data_dir, timeout=30) as js:
        for stream, (retention, names) in streams.items():
            subject = stream.lower() + ".job"
            if phase == "ack":
                js.add_stream(name=stream, subjects=[subject], num_replicas=3,
                              retention=RetentionPolicy(retention), storage=StorageType.FILE)
                for name in names:
                    js.add_consumer(stream, durable_name=name, ack_policy=AckPolicy.EXPLICIT,
                                    ack_wait=3.0)
                js.publish_batch([(subject, b"%d" % i) for i in range(N)])
                for name in names:
                    # acks as an application sends them (async, in batches); the phase ends
                    # once the consumer has applied every one of them
                    sub = js.pull_subscribe(durable=name, stream=stream)
                    skip = unacked[name]
                    deadline = time.monotonic() + 120
                    while True:
                        assert time.monotonic() < deadline, f"{name}: acks not applied"
                        try:
                            info = js.consumer_info(stream, name)
                            if info.num_pending == 0 and info.num_ack_pending == len(skip):
                                break
                            got = sub.fetch(100, timeout=2)
                        except rayjet.errors.APIError:  # nothing yet, or an election
                            continue
                        for m in got:
                            if m.metadata.sequence.stream not in skip:
                                m.ack()  # again when an ack was lost and it came back
                        sub.acks.flush()
                print("ACKED", stream, js.stream_info(stream).state.messages)
                continue
            expected = set().union(*(unacked[n] for n in names))
            deadline = time.monotonic() + 90
            while True:
                try:
                    n = js.stream_info(stream).state.messages
                except Exception:
                    n = None
                if n == len(expected):
                    break
                assert time.monotonic() < deadline, f"{stream} holds {n}, want {len(expected)}"
                time.sleep(0.3)
            got = {js.get_msg(stream, s).seq for s in sorted(expected)}
            assert got == expected
            print("RECONCILED", stream, n)
""")


def test_acks_reach_the_stream_across_a_full_restart(tmp_path):
    """Work-queue and interest streams whose acks removed messages: after Ray restarts on
    the same data dir, each holds exactly the unacked ones."""
    out = run_phases(tmp_path, RESTART_SCRIPT, ("ack", "check"))
    assert "RECONCILED JOBS_WQ" in out and "RECONCILED JOBS_INT" in out


def test_deleting_a_consumer_sweeps_what_nobody_needs(js, stream_name):
    """An interest stream with consumers C0 (everything) and C1 (odd payload subjects):
    deleting C0 leaves exactly what C1 has not acked, removed by sweep steps outside apply,
    and the sweep goes on under a new leader when the stream's leader is killed."""
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.*"], num_replicas=3,
                  retention=RetentionPolicy.INTEREST, storage=StorageType.FILE)
    js.add_consumer(s, durable_name="C0", ack_policy=AckPolicy.EXPLICIT)
    js.add_consumer(s, durable_name="C1", ack_policy=AckPolicy.EXPLICIT,
                    filter_subject=f"{s}.odd")
    try:
        js.publish_batch([(f"{s}.odd" if i % 2 else f"{s}.even", b"x") for i in range(N)])
        sub = js.pull_subscribe(durable="C1", stream=s)
        acked = set()
        while len(acked) < N // 4:
            for m in sub.fetch(BATCH, timeout=5):
                m.ack_sync(timeout=10)
                acked.add(m.metadata.sequence.stream)
        sub.unsubscribe()
        js.delete_consumer(s, "C0")
        kill(replica_handles(js, s)[leader_id(js, s)])
        wanted_by_c1 = {seq for seq in range(1, N + 1) if seq % 2 == 0}  # seq = i + 1
        wait_stream_holds(js, s, wanted_by_c1 - acked)
    finally:
        js.delete_stream(s)
