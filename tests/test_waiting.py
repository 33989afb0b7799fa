"""The shared polling helper: what it returns, retries and reports."""

from __future__ import annotations

import itertools

import pytest

from tests.waiting import wait_for


def test_returns_the_first_truthy_value():
    calls = itertools.count(1)
    assert wait_for(lambda: (n := next(calls)) >= 3 and n, 5, interval=0.001) == 3


def test_a_timeout_names_what_and_the_last_value():
    with pytest.raises(AssertionError, match=r"waiting for the answer \(last: \[\]\)"):
        wait_for(list, 0.05, "the answer", interval=0.001)


def test_errors_it_retries_count_as_not_yet_and_are_reported():
    calls = itertools.count(1)

    def flaky():
        if next(calls) < 3:
            raise ConnectionError("restarting")
        return "up"

    assert wait_for(flaky, 5, interval=0.001, retry_on=ConnectionError) == "up"

    def down():
        raise ConnectionError("still restarting")

    with pytest.raises(AssertionError, match="still restarting"):
        wait_for(down, 0.05, interval=0.001, retry_on=(ConnectionError, KeyError))


def test_other_errors_propagate_at_once():
    calls = itertools.count(1)

    def broken():
        next(calls)
        raise KeyError("bug")

    with pytest.raises(KeyError):
        wait_for(broken, 5, interval=0.001, retry_on=ConnectionError)
    assert next(calls) == 2  # called once
