"""Subscriptions matched by NATS wildcards, one member per queue group."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.gateway.interest import Interest, Subscription
from rayjet.subjects import subject_matches

toks = st.sampled_from(["a", "b", "c"])
subjects = st.lists(toks, min_size=1, max_size=4).map(".".join)
filters = st.lists(st.sampled_from(["a", "b", "c", "*"]), min_size=1, max_size=4).flatmap(
    lambda ts: st.sampled_from([".".join(ts), ".".join([*ts, ">"])]))


@settings(deadline=None, max_examples=300)
@given(st.lists(filters, max_size=8), st.lists(st.booleans(), max_size=8), subjects)
def test_matches_what_subject_matching_says(fs, removed, subject):
    interest = Interest()
    subs = [Subscription(None, str(i), f) for i, f in enumerate(fs)]
    for s in subs:
        interest.add(s)
    gone = [s for s, r in zip(subs, removed) if r]
    for s in gone:
        interest.remove(s)
    plain, groups = interest.match(subject)
    expected = {s.sid for s in subs if s not in gone and subject_matches(subject, s.subject)}
    assert {s.sid for s in plain} == expected
    assert groups == []


def test_one_member_of_each_queue_group():
    interest = Interest(random.Random(1))
    a1 = Subscription("c1", "1", "jobs.*", "workers")
    a2 = Subscription("c2", "2", "jobs.>", "workers")
    b = Subscription("c3", "3", "jobs.new", "audit")
    p = Subscription("c4", "4", "jobs.new")
    for s in (a1, a2, b, p):
        interest.add(s)
    seen = set()
    for _ in range(50):
        got = interest.receivers("jobs.new")
        assert len(got) == 3 and p in got and b in got
        seen |= {s.sid for s in got if s.queue == "workers"}
    assert seen == {"1", "2"}  # both members take turns
    interest.remove(a1)
    interest.remove(a2)
    assert set(interest.receivers("jobs.new")) == {b, p}
    assert not interest.has_interest("jobs")
