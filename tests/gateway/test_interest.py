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


def test_a_prefix_subscription_is_the_sole_listener_until_a_client_listens_there():
    interest = Interest()
    acks = Subscription("bridge", "internal-1", "$JS.ACK.>")
    interest.add(acks)
    elsewhere = [Subscription("c", "1", "_INBOX.x.*"), Subscription("c", "2", "$JS.API.>"),
                 Subscription("c", "3", "*.ACK"), Subscription("c", "4", "$JS.ACK")]
    for s in elsewhere:  # none of these hears a subject under $JS.ACK
        interest.add(s)
    assert interest.sole_listener(acks)
    for subject in (">", "$JS.>", "*.ACK.>", "$JS.*.>", "$JS.ACK.*", "$JS.ACK.S.*.>",
                    "$JS.ACK.S.C.1.2.3.4.0", "*.*.S.>"):
        listener = Subscription("c", "9", subject, "q" if subject == ">" else None)
        interest.add(listener)
        assert not interest.sole_listener(acks), subject
        interest.remove(listener)
        assert interest.sole_listener(acks), subject


def test_matching_stays_right_past_the_cache_limit():
    from rayjet.gateway import interest as mod

    interest = Interest()
    inbox = Subscription("c", "1", "_INBOX.abc.*")
    stream = Subscription("c", "2", "orders")
    interest.add(inbox)
    interest.add(stream)
    for i in range(mod._CACHE_LIMIT * 2):  # every reply subject seen once
        assert interest.receivers(f"_INBOX.abc.{i}") == [inbox]
        assert interest.receivers("orders") == [stream]
        assert interest.receivers(f"_INBOX.abd.{i}") == []
    assert len(interest._cache) <= mod._CACHE_LIMIT
    assert len(interest._frontiers) <= mod._CACHE_LIMIT
