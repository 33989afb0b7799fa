"""A follower paused (SIGSTOP) for 30 s while its leader takes 100,000 messages: the leader
neither blocks nor keeps everything for it (its memory stays bounded: the data plane's
per-peer budget and the raft log's compactions bound what waits for the follower), and
after SIGCONT the follower catches up to the same messages.

Bounded, measured: by the middle of the run the queue to the paused follower is full
(64 MiB) and the leader's working set warm; the second half's 150 MB then add little to the
leader's peak memory, where a leader keeping them for the follower would grow by all."""

from __future__ import annotations

import os
import signal
import time

import psutil
import ray

from rayjet import StorageType
from tests.cluster.test_faults import leader_id, replica_handles
from tests.replicas import pid

MESSAGES = 100_000
SIZE = 3 * 1024  # 300 MB in all
BATCH = 2_000
PAUSE = 30.0
MB = 1 << 20


def _last_seq(handle) -> int:
    return ray.get(handle.status.remote(), timeout=30)["last_seq"]


def test_a_paused_follower_costs_its_leader_bounded_memory_and_catches_up(js, stream_name):
    name = stream_name
    # dedicated: the leader's process holds this replica only, so its memory is the
    # replica's (a shared host's also grows with whatever else it runs)
    js.add_stream(name=name, subjects=[f"{name}.>"], num_replicas=3, storage=StorageType.FILE,
                  hosting="dedicated")
    js.publish(f"{name}.warm", b"up")
    handles = replica_handles(js, name)
    lead = leader_id(js, name)
    follower = next(rid for rid in handles if rid != lead)
    leader_pid, follower_pid = pid(handles[lead]), pid(handles[follower])
    assert leader_pid != follower_pid  # a group's replicas live in different processes
    leader_proc = psutil.Process(leader_pid)
    filler = b"p" * (SIZE - 8)
    rss_before = peak = leader_proc.memory_info().rss
    peak_at_half = 0
    os.kill(follower_pid, signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        for start in range(0, MESSAGES, BATCH):
            acks = js.publish_batch([(f"{name}.m", b"%08d" % i + filler)
                                     for i in range(start, start + BATCH)], timeout=60)
            failed = [a for a in acks if isinstance(a, Exception)]
            assert not failed, (len(failed), repr(failed[0]))
            peak = max(peak, leader_proc.memory_info().rss)
            if start + BATCH == MESSAGES // 2:
                peak_at_half = peak
        published_in = time.monotonic() - paused_at
        st = ray.get(handles[lead].status.remote(), timeout=30)
        # what the leader's log held then (reported when the memory bound fails)
        log_held = {k: st.get(k) for k in ("first_index", "last_index", "snapshot_index",
                                           "applied", "progress", "transport")}
        while time.monotonic() - paused_at < PAUSE:  # the pause the test is about
            peak = max(peak, leader_proc.memory_info().rss)
            time.sleep(0.5)
    finally:
        os.kill(follower_pid, signal.SIGCONT)
    growth = peak - rss_before
    payload = MESSAGES * SIZE
    late = peak - peak_at_half
    print(f"published {payload // MB} MB in {published_in:.1f}s with a follower paused; "
          f"leader RSS {rss_before // MB} -> {peak_at_half // MB} at half -> peak "
          f"{peak // MB} MB (+{growth // MB} MB, +{late // MB} MB in the second half); "
          f"transport {log_held['transport']}")
    assert late < payload / 2 / 2, (f"the second half grew the leader by {late // MB} MB; "
                                    f"its log then: {log_held}")
    last = js.stream_info(name).state.last_seq
    assert last == MESSAGES + 1
    deadline = time.monotonic() + 120
    while _last_seq(handles[follower]) < last:  # by entries, or a snapshot and a store copy
        assert time.monotonic() < deadline, "the follower did not catch up after SIGCONT"
        time.sleep(0.2)
    got = ray.get(handles[follower].read_range.remote(last - 4, last, max_msgs=10), timeout=60)
    assert got["seq"] == list(range(last - 4, last + 1))
    assert [d[:8] for d in got["data"]] == [b"%08d" % i for i in range(MESSAGES - 5, MESSAGES)]
    js.delete_stream(name)
