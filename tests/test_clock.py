import pytest

from rayjet.clock import NANOS_PER_SECOND, SYSTEM_CLOCK, Clock, ManualClock, seeded_rng


def test_manual_clock_moves_only_when_told():
    clock = ManualClock(start_ns=10 * NANOS_PER_SECOND)
    assert clock.now_ns() == 10 * NANOS_PER_SECOND
    clock.advance(1.5)
    assert clock.now_ns() == 11_500_000_000
    assert clock.monotonic_ns() == 1_500_000_000
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        clock.set(0)


def test_clocks_satisfy_protocol():
    assert isinstance(ManualClock(), Clock)
    assert isinstance(SYSTEM_CLOCK, Clock)
    assert SYSTEM_CLOCK.monotonic_ns() <= SYSTEM_CLOCK.monotonic_ns()


def test_seeded_rng_is_private_and_repeatable():
    a, b = seeded_rng(7), seeded_rng(7)
    assert [a.randint(0, 100) for _ in range(5)] == [b.randint(0, 100) for _ in range(5)]
