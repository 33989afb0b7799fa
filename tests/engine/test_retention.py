"""Interest and work-queue retention: messages go once the consumers that need them ack."""

from __future__ import annotations

from .conftest import refused


def test_limits_retention_ignores_acks(make):
    h = make()
    h.engine.register_consumer("C")
    h.pub("s.a")
    assert h.apply(h.engine.prepare_ack("C", 1)).value is False
    assert h.seqs() == [1]


def test_workqueue_removes_on_first_ack(make):
    h = make(retention="workqueue")
    h.engine.register_consumer("C")
    h.pub("s.a")
    h.pub("s.a")
    assert h.apply(h.engine.prepare_ack("C", 1)).value is True
    assert h.seqs() == [2]


def test_workqueue_consumers_must_not_overlap(make):
    h = make(retention="workqueue")
    h.engine.register_consumer("A", ["s.a"])
    h.engine.register_consumer("B", ["s.b"])
    with refused(10100):
        h.engine.register_consumer("C", ["s.*"])
    h2 = make(retention="workqueue")
    h2.engine.register_consumer("A")
    with refused(10099):
        h2.engine.register_consumer("B")


def test_interest_removes_when_all_interested_consumers_acked(make):
    h = make(retention="interest")
    h.engine.register_consumer("A")
    h.engine.register_consumer("B", ["s.b"])
    h.pub("s.a")  # only A is interested
    h.pub("s.b")  # A and B
    assert h.apply(h.engine.prepare_ack("A", 1)).value is True
    assert h.apply(h.engine.prepare_ack("A", 2)).value is False
    assert h.apply(h.engine.prepare_ack("B", 2)).value is True
    assert h.seqs() == []


def test_interest_without_consumers_stores_nothing(make):
    h = make(retention="interest")
    ack = h.pub("s.a", b"x", {"Nats-Msg-Id": "1"})
    assert ack.seq == 1 and h.state().msgs == 0 and h.state().last_seq == 1
    assert h.pub("s.a", b"x", {"Nats-Msg-Id": "1"}).duplicate
    h.engine.register_consumer("C", ["s.b"])
    h.pub("s.a")
    h.pub("s.b")
    assert [m.subject for m in h.msgs()] == ["s.b"]


def test_interest_consumer_only_needs_what_came_after_it(make):
    h = make(retention="interest")
    h.engine.register_consumer("A")
    h.pub("s.a")
    h.engine.register_consumer("B", start_seq=2)
    h.pub("s.a")
    assert h.apply(h.engine.prepare_ack("A", 1)).value is True
    assert h.apply(h.engine.prepare_ack("A", 2)).value is False


def test_unregistering_the_last_interested_consumer_removes_its_messages(make):
    h = make(retention="interest")
    h.engine.register_consumer("A")
    h.engine.register_consumer("B", ["s.b"])
    h.pub("s.a")
    h.pub("s.b")
    h.apply(h.engine.prepare_ack("B", 2))
    assert h.engine.unregister_consumer("A") is True
    assert h.seqs() == [1, 2]  # apply removes nothing itself: the leader sweeps in steps
    assert h.apply(h.engine.prepare_sweep()).value == 2
    assert h.seqs() == [] and h.engine.sweep_from == 0 and h.engine.prepare_sweep() is None


def test_sweep_steps_are_bounded_and_go_on_after_a_snapshot(make):
    h = make(retention="interest")
    h.engine.register_consumer("A")
    h.engine.register_consumer("B", ["s.b"])
    for i in range(10):
        h.pub("s.b" if i % 2 else "s.a")  # B wants the even sequences
    h.apply(h.engine.prepare_consumer("A", remove=True))
    step = h.engine.prepare_sweep(limit=3)
    assert (step.start, step.upto, step.seqs) == (1, 3, (1, 3))
    h.apply(step)
    assert h.engine.sweep_from == 4 and h.seqs() == [2, 4, 5, 6, 7, 8, 9, 10]
    # a new leader (or a restarted replica) goes on from the replicated position
    snap = h.engine.snapshot()
    h.engine.sweep_from = 0
    h.engine.restore(snap)
    assert h.engine.sweep_from == 4
    while (step := h.engine.prepare_sweep(limit=3)) is not None:
        h.apply(step)
    assert h.seqs() == [2, 4, 6, 8, 10]


def test_sweep_step_rechecks_messages_at_apply(make):
    """An ack or a new consumer between the leader's read and the apply wins."""
    h = make(retention="interest")
    h.engine.register_consumer("A")
    h.pub("s.a")
    h.pub("s.a")
    h.apply(h.engine.prepare_consumer("A", remove=True))
    step = h.engine.prepare_sweep()
    assert step.seqs == (1, 2)
    h.apply(h.engine.prepare_consumer("C", start_seq=2))  # C wants seq 2 from now on
    assert h.apply(step).value == 1
    assert h.seqs() == [2]


def test_consumer_changes_through_the_log(make):
    h = make(retention="workqueue", max_consumers=1)
    assert h.apply(h.engine.prepare_consumer("C", ["s.a"])).ok
    with refused(10026):
        h.engine.prepare_consumer("D")
    h.pub("s.a")
    assert h.apply(h.engine.prepare_ack("C", 1)).value is True
    assert h.apply(h.engine.prepare_consumer("C", remove=True)).ok
    assert len(h.engine.interest) == 0
