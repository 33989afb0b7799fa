"""Pull consumer priority groups (ADR-42): overflow, pinned_client, prioritized."""

from __future__ import annotations

import pytest

from rayjet.api import ConsumerConfig, StreamConfig
from rayjet.api.headers import decode_headers
from rayjet.api.validate_consumer import validate_consumer_config
from rayjet.engine.consumer.types import (
    GROUP_PINNED_TYPE,
    GROUP_UNPINNED_TYPE,
    PIN_ID_HEADER,
)
from rayjet.errors import APIError, InvalidPriorityGroupError


def codes(batch) -> list[tuple[str, int, str]]:
    return [(s.reply, s.code, s.description) for s in batch.statuses]


def to(batch) -> list[tuple[str, int]]:
    return [(r, d.stream_seq) for r, d in batch.deliveries]


def pin_of(delivery) -> str | None:
    return decode_headers(delivery.hdr).get(PIN_ID_HEADER)


def pins(batch) -> set[str | None]:
    return {pin_of(d) for _, d in batch.deliveries}


def advisories(c, type_: str) -> list[dict]:
    return [a.body for a in c.advisories if a.body["type"] == type_]


def overflow(make, **kw):
    return make(priority_policy="overflow", priority_groups=["jobs"], **kw)


def pinned(make, timeout: float = 5.0, **kw):
    return make(priority_policy="pinned_client", priority_groups=["jobs"],
                priority_timeout=timeout, **kw)


def prioritized(make, **kw):
    return make(priority_policy="prioritized", priority_groups=["jobs"], **kw)


# -- pull request checks ------------------------------------------------------------------
@pytest.mark.parametrize("kw, status", [
    ({}, (400, "Bad Request - Priority Group missing")),
    ({"group": "ghost"}, (400, "Bad Request - Invalid Priority Group")),
    ({"group": "jobs", "pin_id": "x"},
     (400, "Bad Request - Not a Pinned Client Priority consumer")),
    ({"group": "jobs", "priority": 10}, (400, "Bad Request - Priority must be between 0 and 9")),
    ({"group": "jobs", "priority": -1}, (400, "Bad Request - Priority must be between 0 and 9")),
])
def test_bad_group_fields_refuse_the_pull(make, kw, status):
    c = overflow(make)
    c.pub()
    b = c.request(batch=1, expires=5.0, **kw)
    assert codes(b) == [("r1", *status)] and b.deliveries == []
    assert c.engine.num_waiting == 0


def test_overflow_fields_need_an_overflow_consumer(make):
    c = pinned(make)
    b = c.request(group="jobs", min_pending=5)
    assert codes(b) == [("r1", 400, "Bad Request - Not a Overflow Priority consumer")]


def test_plain_consumer_ignores_a_group_name(make):
    c = make()
    c.pub()
    assert to(c.request(group="anything")) == [("r1", 1)]


# -- overflow -------------------------------------------------------------------------------
def test_overflow_min_pending_holds_the_pull_until_the_backlog_is_that_deep(make):
    c = overflow(make)
    for _ in range(5):
        c.pub()
    b = c.request(batch=1, reply="west", group="jobs", min_pending=10, expires=60)
    assert b.deliveries == [] and b.statuses == [] and c.engine.num_waiting == 1
    for _ in range(4):
        c.pub()
    assert c.serve().deliveries == []  # 9 pending
    c.pub()
    assert to(c.serve()) == [("west", 1)]  # 10 pending


def test_overflow_stops_mid_batch_once_the_backlog_drops_below_min_pending(make):
    c = overflow(make)
    for _ in range(6):
        c.pub()
    b = c.request(batch=10, reply="west", group="jobs", min_pending=5, expires=60)
    # 6 pending, then 5: served; then 4 < 5 pending: held back
    assert to(b) == [("west", 1), ("west", 2)]
    assert c.engine.num_waiting == 1 and c.engine.info(c.now).num_pending == 4


def test_overflow_min_pending_or_min_ack_pending(make):
    c = overflow(make)
    for _ in range(10):
        c.pub()
    assert len(c.request(batch=3, reply="local", group="jobs").deliveries) == 3  # not acked
    b = c.request(batch=1, reply="west", group="jobs", min_pending=1000, min_ack_pending=4,
                  expires=60)
    assert b.deliveries == []  # 7 pending < 1000, 3 ack pending < 4
    # local's message makes 4 ack pending: west is served right after it
    assert to(c.request(batch=1, reply="local", group="jobs")) == [("local", 4), ("west", 5)]
    c.ack(1)
    c.ack(2)
    b = c.request(batch=1, reply="west2", group="jobs", min_pending=1000, min_ack_pending=4,
                  expires=60)
    assert b.deliveries == []


def test_overflow_unconditioned_pull_takes_what_the_conditioned_may_not(make):
    c = overflow(make)
    c.request(batch=5, reply="west", group="jobs", min_pending=100, expires=60)
    c.request(batch=5, reply="east", group="jobs", expires=60)
    for _ in range(3):
        c.pub()
    assert to(c.serve()) == [("east", 1), ("east", 2), ("east", 3)]


def test_overflow_no_wait_pull_held_back_ends_at_once(make):
    c = overflow(make)
    c.pub()
    b = c.request(batch=1, reply="west", group="jobs", min_pending=100, no_wait=True)
    assert codes(b) == [("west", 404, "No Messages")] and c.engine.num_waiting == 0


# -- pinned_client -------------------------------------------------------------------------
def test_first_delivery_pins_the_client(make):
    c = pinned(make)
    c.pub()
    b = c.request(batch=1, reply="a", group="jobs", expires=60)
    assert to(b) == [("a", 1)]
    pin = pin_of(b.deliveries[0][1])
    assert pin and len(pin) == 22
    [adv] = advisories(c, GROUP_PINNED_TYPE)
    assert (adv["group"], adv["pinned_id"], adv["stream"], adv["consumer"]) == (
        "jobs", pin, "ORDERS", "DISPATCH")
    [state] = c.engine.info(c.now).priority_groups
    assert (state.group, state.pinned_client_id) == ("jobs", pin)
    assert state.pinned_ts is not None
    assert c.engine.info(c.now).to_dict()["priority_groups"][0]["pinned_client_id"] == pin


def test_pinned_client_keeps_the_messages_and_the_header(make):
    c = pinned(make)
    c.pub()
    pin = pin_of(c.request(reply="a", group="jobs").deliveries[0][1])
    for _ in range(4):
        c.pub()
    b = c.request(batch=4, reply="a2", group="jobs", pin_id=pin)
    assert [r for r, _ in b.deliveries] == ["a2"] * 4 and pins(b) == {pin}


def test_pull_without_id_waits_while_another_client_is_pinned(make, clock):
    c = pinned(make, timeout=30)
    c.pub()
    pin = pin_of(c.request(reply="a", group="jobs").deliveries[0][1])
    c.pub()
    b = c.request(batch=1, reply="b", group="jobs", expires=2)
    assert b.deliveries == [] and b.statuses == [] and c.engine.num_waiting == 1
    clock.advance(1)
    assert c.serve().deliveries == []
    clock.advance(1)
    assert codes(c.serve()) == [("b", 408, "Request Timeout")]
    assert to(c.request(reply="a2", group="jobs", pin_id=pin)) == [("a2", 2)]


def test_pull_with_another_id_gets_423(make):
    c = pinned(make)
    c.pub()
    c.request(reply="a", group="jobs")
    b = c.request(reply="b", group="jobs", pin_id="not-the-pin", expires=5)
    assert codes(b) == [("b", 423, "Nats-Pin-Id mismatch")] and c.engine.num_waiting == 0


def test_pin_goes_to_the_lowest_priority_number(make):
    c = pinned(make)
    c.request(reply="p5", group="jobs", priority=5, expires=60)
    c.request(reply="p1", group="jobs", priority=1, expires=60)
    c.request(reply="p1-later", group="jobs", priority=1, expires=60)
    c.pub()
    b = c.serve()
    assert to(b) == [("p1", 1)] and pin_of(b.deliveries[0][1])


def test_pin_fails_over_after_priority_timeout(make, clock):
    c = pinned(make, timeout=5)
    c.pub()
    old = pin_of(c.request(reply="a", group="jobs").deliveries[0][1])
    # a pull from the pinned client within the timeout keeps the pin for another 5 s
    clock.advance(4)
    assert codes(c.request(reply="a2", group="jobs", pin_id=old, no_wait=True)) == [
        ("a2", 404, "No Messages")]
    c.request(reply="b", group="jobs", expires=60)  # a standby
    clock.advance(4)
    c.pub()
    assert c.serve().deliveries == []
    assert c.engine.info(c.now).priority_groups[0].pinned_client_id == old
    # 5 s without a pull from it: the pin is gone and the standby gets the message
    clock.advance(1)
    b = c.serve()
    assert to(b) == [("b", 2)]
    new = pin_of(b.deliveries[0][1])
    assert new and new != old
    [adv] = advisories(c, GROUP_UNPINNED_TYPE)
    assert (adv["group"], adv["reason"]) == ("jobs", "timeout")
    assert c.engine.info(c.now).priority_groups[0].pinned_client_id == new
    assert codes(c.request(reply="a3", group="jobs", pin_id=old)) == [
        ("a3", 423, "Nats-Pin-Id mismatch")]


def test_pin_runs_out_with_nobody_waiting(make, clock):
    c = pinned(make, timeout=5)
    c.pub()
    c.request(reply="a", group="jobs")
    assert c.engine.next_pin_deadline() == c.now + 5 * 10**9
    clock.advance(5)
    c.serve()
    assert [a["reason"] for a in advisories(c, GROUP_UNPINNED_TYPE)] == ["timeout"]
    assert not c.engine.pinned and c.engine.info(c.now).priority_groups[0].pinned_ts is None


def test_waiting_pull_with_an_outdated_pin_ends_with_423_when_messages_flow(make, clock):
    c = pinned(make, timeout=5)
    c.pub()
    old = pin_of(c.request(reply="a", group="jobs").deliveries[0][1])
    c.request(reply="a2", group="jobs", pin_id=old, expires=60)  # waits: nothing to get
    clock.advance(5)
    c.serve()  # the pin runs out while a2 waits
    c.request(reply="b", group="jobs", expires=60)
    c.pub()
    b = c.serve()
    assert codes(b) == [("a2", 423, "Nats-Wrong-Pin-Id")]
    assert to(b) == [("b", 2)] and pin_of(b.deliveries[0][1]) not in (None, old)


def test_unpin_hands_the_pin_to_a_waiting_standby(make):
    c = pinned(make, timeout=60)
    c.pub()
    old = pin_of(c.request(reply="a", group="jobs").deliveries[0][1])
    c.request(reply="b", group="jobs", expires=60)
    c.pub()
    assert c.serve().deliveries == []  # b is a standby while a holds the pin
    b = c.engine.unpin("jobs", c.now)
    c.take(b)
    assert to(b) == [("b", 2)]
    new = pin_of(b.deliveries[0][1])
    assert new and new != old
    [adv] = advisories(c, GROUP_UNPINNED_TYPE)
    assert (adv["group"], adv["reason"]) == ("jobs", "admin")
    assert [a["pinned_id"] for a in advisories(c, GROUP_PINNED_TYPE)] == [old, new]
    assert codes(c.request(reply="a2", group="jobs", pin_id=old)) == [
        ("a2", 423, "Nats-Pin-Id mismatch")]


def test_unpin_checks_the_group(make):
    c = pinned(make)
    c.pub()
    pin = pin_of(c.request(reply="a", group="jobs").deliveries[0][1])
    with pytest.raises(InvalidPriorityGroupError) as e:
        c.engine.unpin("ghost", c.now)
    assert (e.value.code, e.value.err_code) == (400, 10160)
    with pytest.raises(APIError) as e:
        c.engine.unpin("", c.now)
    assert e.value.err_code == 10025
    assert c.engine.info(c.now).priority_groups[0].pinned_client_id == pin


def test_a_new_leader_starts_unpinned(make):
    c = pinned(make, timeout=60)
    c.pub()
    old = pin_of(c.request(reply="a", group="jobs").deliveries[0][1])
    c.engine.set_follower()
    c.commit(c.engine.set_leader(c.now))
    assert c.engine.info(c.now).priority_groups[0].pinned_client_id is None
    b = c.request(reply="a2", group="jobs", pin_id=old, expires=60)
    assert b.statuses == []  # nothing pinned yet: it waits
    c.request(reply="b", group="jobs", expires=60)
    c.pub()
    b = c.serve()
    assert codes(b) == [("a2", 423, "Nats-Wrong-Pin-Id")] and to(b) == [("b", 2)]


def test_pinned_client_no_wait_pull_is_served_and_pinned(make):
    c = pinned(make)
    c.pub()
    b = c.request(batch=1, reply="a", group="jobs", no_wait=True)
    assert to(b) == [("a", 1)] and pin_of(b.deliveries[0][1])


def test_standby_no_wait_pull_ends_at_once(make):
    c = pinned(make)
    c.pub()
    c.pub()
    c.request(reply="a", group="jobs")
    b = c.request(batch=1, reply="b", group="jobs", no_wait=True)
    assert codes(b) == [("b", 404, "No Messages")] and b.deliveries == []


def test_max_bytes_refusal_does_not_pin(make):
    c = pinned(make)
    c.pub(data=b"x" * 500)
    b = c.request(reply="a", group="jobs", max_bytes=100, expires=60)
    assert [s.code for s in b.statuses] == [409] and b.deliveries == []
    assert c.engine.info(c.now).priority_groups[0].pinned_client_id is None
    assert advisories(c, GROUP_PINNED_TYPE) == []


# -- prioritized ---------------------------------------------------------------------------
def test_lower_priority_number_is_served_first(make):
    c = prioritized(make)
    c.request(batch=5, reply="high", group="jobs", priority=5, expires=60)
    c.request(batch=5, reply="low", group="jobs", priority=0, expires=60)
    for _ in range(3):
        c.pub()
    assert to(c.serve()) == [("low", 1), ("low", 2), ("low", 3)]


def test_higher_numbers_get_messages_when_no_lower_pull_waits(make):
    c = prioritized(make)
    c.request(batch=5, reply="high", group="jobs", priority=5, expires=60)
    c.pub()
    assert to(c.serve()) == [("high", 1)]
    c.request(batch=5, reply="low", group="jobs", priority=0, expires=60)
    c.pub()
    assert to(c.serve()) == [("low", 2)]
    c.request(batch=1, reply="mid", group="jobs", priority=3, expires=60)
    for _ in range(6):
        c.pub()
    # low's batch (4 more) first, then mid's, then high's
    assert [r for r, _ in c.serve().deliveries] == ["low"] * 4 + ["mid", "high"]


def test_round_robin_within_a_priority(make):
    c = prioritized(make)
    c.request(batch=10, reply="c1", group="jobs", expires=60)
    c.request(batch=10, reply="c2", group="jobs", expires=60)
    c.request(batch=10, reply="c3", group="jobs", priority=1, expires=60)
    for _ in range(4):
        c.pub()
    assert [r for r, _ in c.serve().deliveries] == ["c1", "c2", "c1", "c2"]


# -- config and info ------------------------------------------------------------------------
def test_push_consumer_with_a_priority_policy_is_refused():
    cfg = ConsumerConfig(durable_name="P", deliver_subject="deliver.here",
                         priority_policy="overflow", priority_groups=["jobs"])
    with pytest.raises(APIError) as e:
        validate_consumer_config(cfg, StreamConfig(name="ORDERS", subjects=["ORDERS.*"]))
    assert e.value.err_code == 10178


def test_info_lists_the_group_only_for_priority_consumers(make):
    assert make().engine.info().priority_groups == ()
    assert "priority_groups" not in make().engine.info().to_dict()
    c = overflow(make)
    assert c.engine.info(c.now).to_dict()["priority_groups"] == [{"group": "jobs"}]
