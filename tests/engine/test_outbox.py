"""The republish outbox: offsets, slow readers, leadership epochs, filters."""

from __future__ import annotations

import pytest

from rayjet.engine.outbox import Outbox


def test_new_reader_sees_only_later_messages():
    box = Outbox(capacity=10, epoch="a")
    box.extend(["m0", "m1"])
    start = box.start_for(None, None)
    assert box.read(start, 100).items == []
    box.extend(["m2", "m3"])
    r = box.read(start, 100)
    assert (r.items, r.next, r.dropped) == (["m2", "m3"], 4, 0)
    assert box.read(r.next, 100).items == []


def test_limit_and_resume():
    box = Outbox(capacity=10, epoch="a")
    box.extend(f"m{i}" for i in range(5))
    r = box.read(0, 2)
    assert r.items == ["m0", "m1"] and r.next == 2
    r = box.read(r.next, 10)
    assert r.items == ["m2", "m3", "m4"] and r.next == 5


def test_slow_reader_is_told_what_it_missed():
    box = Outbox(capacity=3, epoch="a")
    box.extend(f"m{i}" for i in range(7))  # m0..m3 overwritten
    r = box.read(1, 10)
    assert (r.items, r.dropped, r.next) == (["m4", "m5", "m6"], 3, 7)
    assert box.first == 4 and box.end == 7


def test_other_epoch_starts_at_the_new_leaders_first_message():
    box = Outbox(capacity=5, epoch="a")
    box.extend(["a0", "a1", "a2"])
    box.reset("b")
    box.extend(["b0"])
    assert box.start_for("a", 3) == 0  # an offset of the old leadership means nothing here
    assert box.read(box.start_for("a", 3), 10).items == ["b0"]
    assert box.start_for("b", 99) == 1  # clamped to the end


def test_filter_skips_but_advances():
    box = Outbox(capacity=10, epoch="a")
    box.extend(["x.1", "y.1", "x.2"])
    r = box.read(0, 10, lambda s: s.startswith("x"))
    assert r.items == ["x.1", "x.2"] and r.next == 3


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        Outbox(capacity=0)
