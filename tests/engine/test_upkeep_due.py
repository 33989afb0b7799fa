"""When an idle stream replica's upkeep next has work (``next_upkeep_ns``): never late (at
that moment something expires, leaves the dedup window or fires) and nothing is due before
it, so a replica may sleep until then instead of polling."""

from __future__ import annotations

import pytest

from rayjet.replication.wal import FileLogStorage, MemoryLog

SECOND = 1_000_000_000


def upkeep_work(h) -> int:
    """What one upkeep pass does now: removals, pruned ids, schedule firings."""
    res = h.engine.expire()
    fired = h.engine.due()
    for op in fired:
        assert h.apply(op).ok
    return res.removed + res.pruned_ids + len(fired)


def assert_due_exactly_then(h, clock) -> None:
    due = h.engine.next_upkeep_ns()
    assert due is not None and due > clock.now_ns()
    clock.advance(ns=due - 1 - clock.now_ns())
    assert upkeep_work(h) == 0, "work was due before next_upkeep_ns"
    clock.advance(ns=1)
    assert upkeep_work(h) > 0, "next_upkeep_ns was late"


@pytest.mark.parametrize("store_kind", ["memory", "file"])
def test_a_stream_without_time_limits_needs_no_upkeep(make, clock, tmp_path, store_kind):
    h = make(store_kind=store_kind, directory=str(tmp_path), duplicate_window=0)
    for i in range(3):
        h.pub("s.a", b"%d" % i)
    assert h.engine.next_upkeep_ns() is None


@pytest.mark.parametrize("store_kind", ["memory", "file"])
def test_max_age_is_due_when_the_oldest_message_ages_out(make, clock, tmp_path, store_kind):
    h = make(store_kind=store_kind, directory=str(tmp_path), max_age=10.0, duplicate_window=0)
    h.pub("s.a")
    clock.advance(4)
    h.pub("s.a")
    assert h.engine.next_upkeep_ns() == clock.now_ns() + 6 * SECOND
    assert_due_exactly_then(h, clock)
    assert h.seqs() == [2]
    assert_due_exactly_then(h, clock)  # then the second one
    assert h.seqs() == [] and h.engine.next_upkeep_ns() is None


def test_a_message_ttl_is_due_at_its_end(make, clock):
    h = make(allow_msg_ttl=True, duplicate_window=0)
    h.pub("s.a", b"", {"Nats-TTL": "30s"})
    h.pub("s.b", b"", {"Nats-TTL": "5s"})
    assert_due_exactly_then(h, clock)
    assert [m.subject for m in h.msgs()] == ["s.a"]


def test_a_msg_id_is_due_when_it_leaves_the_duplicate_window(make, clock):
    h = make(duplicate_window=120.0)
    h.pub("s.a", b"", {"Nats-Msg-Id": "one"})
    assert h.engine.next_upkeep_ns() == clock.now_ns() + 120 * SECOND + 1
    assert_due_exactly_then(h, clock)
    assert h.engine.next_upkeep_ns() is None


def test_a_schedule_is_due_when_it_fires_on_the_leader_only(make, clock):
    h = make(allow_msg_schedules=True, duplicate_window=0)
    h.pub("s.sched", b"tick", {"Nats-Schedule": "@every 5s", "Nats-Schedule-Target": "s.out"})
    assert_due_exactly_then(h, clock)
    assert [m.subject for m in h.msgs()] == ["s.sched", "s.out"]
    h.engine.set_follower()
    assert h.engine.next_upkeep_ns() is None  # a follower never fires


def test_the_earliest_of_several_is_due(make, clock):
    h = make(max_age=60.0, duplicate_window=20.0, allow_msg_ttl=True)
    h.pub("s.a", b"", {"Nats-Msg-Id": "x"})
    h.pub("s.b", b"", {"Nats-TTL": "7s"})
    assert h.engine.next_upkeep_ns() == clock.now_ns() + 7 * SECOND


def test_a_raft_log_waits_to_sync_only_while_it_has_unsynced_writes(tmp_path):
    from rayjet.clock import ManualClock
    from rayjet.raft import Entry

    clock = ManualClock()
    log = FileLogStorage(tmp_path, sync_interval=2.0, clock=clock)
    assert log.seconds_to_sync() is None
    log.save(None, [Entry(term=1, index=1, data=b"x")])
    assert log.seconds_to_sync() == pytest.approx(2.0)
    clock.advance(1.5)
    assert log.seconds_to_sync() == pytest.approx(0.5)
    clock.advance(1)
    assert log.seconds_to_sync() == 0.0
    log.maybe_sync()
    assert log.seconds_to_sync() is None
    assert MemoryLog().seconds_to_sync() is None
