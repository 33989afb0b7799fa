"""Publish and subscribe permissions: nats-server's decisions, a reference evaluation over
random rule lists and subjects, the configuration's shapes, and allow_responses."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.auth.permissions import (
    Entry,
    Permissions,
    Replies,
    ResponseRule,
    Rules,
    parse_duration,
)
from rayjet.errors import ServerConfigError


def perms(doc):
    return Permissions.from_config(doc)


def test_allow_then_deny_for_publish():
    p = perms({"publish": {"allow": ["orders.>", "audit"], "deny": ["orders.secret.*"]}})
    assert p.can_publish("orders.new") and p.can_publish("audit")
    assert not p.can_publish("orders.secret.x")
    assert not p.can_publish("other")
    assert perms({"publish": {"deny": ["x.>"]}}).can_publish("y")  # no allow list: all


def test_wildcard_subscriptions_are_checked_token_by_token():
    p = perms({"subscribe": ["orders.*", "events.>"]})
    assert p.can_subscribe("orders.*") and p.can_subscribe("orders.new")
    assert p.can_subscribe("orders.>")  # '*' of the rule takes the token '>' as it is
    assert p.can_subscribe("events.a.*")
    assert not p.can_subscribe(">")
    assert not p.can_subscribe("orders.a.b")
    assert not perms({"subscribe": ["orders.new"]}).can_subscribe("orders.*")


def test_queue_entries():
    only_v1 = perms({"subscribe": ["foo v1"]})
    assert only_v1.can_subscribe("foo", "v1")
    assert not only_v1.can_subscribe("foo", "v2") and not only_v1.can_subscribe("foo")
    both = perms({"subscribe": ["foo", "foo v1"]})
    assert both.can_subscribe("foo") and both.can_subscribe("foo", "v1")
    assert not both.can_subscribe("foo", "v2")
    wild = perms({"subscribe": ["foo v.*"]})
    assert wild.can_subscribe("foo", "v.1") and not wild.can_subscribe("foo", "w.1")
    denied = perms({"subscribe": {"deny": ["foo bad"]}})
    assert denied.can_subscribe("foo") and denied.can_subscribe("foo", "good")
    assert not denied.can_subscribe("foo", "bad")


def test_deliveries_filtered_when_a_wildcard_subscription_overlaps_a_deny():
    p = perms({"subscribe": {"deny": ["orders.secret"]}})
    assert p.can_subscribe("orders.*")
    assert p.filters_deliveries("orders.*")
    assert not p.filters_deliveries("orders.new")
    assert not p.filters_deliveries("audit.*")
    assert p.delivery_denied("orders.secret") and not p.delivery_denied("orders.new")


def test_allow_responses_turns_off_the_blanket_publish_allowance():
    p = perms({"allow_responses": True})
    assert not p.can_publish("anything")
    assert p.responses == ResponseRule(1, 120.0)
    p = perms({"allow_responses": {"max": 3, "expires": "1s"}, "publish": {"deny": ["x"]}})
    assert p.responses == ResponseRule(3, 1.0) and p.publish.allow == ()


def test_replies_answered_within_max_and_expiry():
    now = [0.0]
    replies = Replies(ResponseRule(2, 10.0), clock=lambda: now[0])
    assert not replies.answer("_INBOX.a")
    replies.handed("_INBOX.a")
    assert replies.answer("_INBOX.a") and replies.answer("_INBOX.a")
    assert not replies.answer("_INBOX.a")  # a third answer is one too many
    replies.handed("_INBOX.b")
    now[0] = 11.0
    assert not replies.answer("_INBOX.b")  # expired
    unlimited = Replies(ResponseRule(-1, -1.0), clock=lambda: now[0])
    unlimited.handed("r")
    now[0] = 1e9
    assert all(unlimited.answer("r") for _ in range(50))


@pytest.mark.parametrize(("doc", "match"), [
    ({"publish": {"allow": ["a..b"]}}, "not a valid subject"),
    ({"publish": ["a b"]}, "not a valid subject"),  # queues only in subscribe rules
    ({"subscribe": ["a b c"]}, "not a valid subject"),
    ({"subscribe": {"maybe": ["a"]}}, "only 'allow' or 'deny'"),
    ({"publsh": ["a"]}, "unknown field"),
    ({"publish": 7}, "subject or a list"),
    ({"allow_responses": {"expires": 5}}, "duration"),
    ({"allow_responses": {"expires": "5 minutes"}}, "not a duration"),
    ("publish", "expected a map"),
])
def test_bad_rules_are_refused_clearly(doc, match):
    with pytest.raises(ServerConfigError, match=match):
        perms(doc)


def test_durations():
    assert parse_duration("1h30m", "x") == 5400.0
    assert parse_duration("250ms", "x") == 0.25
    assert parse_duration("-1s", "x") == -1.0


# -- a reference evaluation ----------------------------------------------------------------
def _regex(pattern: str) -> re.Pattern:
    out = []
    for tok in pattern.split("."):
        out.append("[^.]+" if tok == "*" else ".+" if tok == ">" else re.escape(tok))
    return re.compile(r"\.".join(out))


def _hits(entries, subject):
    return [e for e in entries if _regex(e.subject).fullmatch(subject)]


def _queue_ok(queue, entries):
    return any(queue == e.queue or (_regex(e.queue).fullmatch(queue) if any(
        t in ("*", ">") for t in e.queue.split(".")) else False) for e in entries)


def reference_subscribe(rules: Rules, subject: str, queue: str | None) -> bool:
    allowed = True
    if rules.allow is not None:
        hits = _hits(rules.allow, subject)
        allowed = any(not e.queue for e in hits)
        queued = [e for e in hits if e.queue]
        if queue and queued:
            allowed = _queue_ok(queue, queued)
    if allowed and rules.deny is not None:
        hits = _hits(rules.deny, subject)
        allowed = not any(not e.queue for e in hits)
        queued = [e for e in hits if e.queue]
        if allowed and queue and queued:
            allowed = not _queue_ok(queue, queued)
    return allowed


def reference_publish(rules: Rules, subject: str) -> bool:
    allowed = rules.allow is None or bool(_hits([e for e in rules.allow], subject))
    return allowed and not (rules.deny and _hits(rules.deny, subject))


TOKENS = st.sampled_from(["a", "b", "c"])
PATTERN_TOKENS = st.sampled_from(["a", "b", "c", "*"])


@st.composite
def patterns(draw):
    toks = draw(st.lists(PATTERN_TOKENS, min_size=1, max_size=3))
    if draw(st.booleans()):
        toks.append(">")
    return ".".join(toks)


@st.composite
def subjects(draw, wildcards: bool):
    toks = draw(st.lists(PATTERN_TOKENS if wildcards else TOKENS, min_size=1, max_size=4))
    if wildcards and draw(st.booleans()):
        toks.append(">")
    return ".".join(toks)


ENTRIES = st.lists(st.builds(Entry, patterns(), st.one_of(
    st.none(), st.sampled_from(["q1", "q2", "q.*"]))), max_size=4).map(tuple)
PLAIN = st.lists(st.builds(Entry, patterns()), max_size=4).map(tuple)


@settings(max_examples=600, deadline=None)
@given(allow=st.one_of(st.none(), ENTRIES), deny=st.one_of(st.none(), ENTRIES),
       subject=subjects(wildcards=True),
       queue=st.one_of(st.none(), st.sampled_from(["q1", "q2", "q.x"])))
def test_subscribe_decision_matches_the_reference(allow, deny, subject, queue):
    p = Permissions(subscribe=Rules(allow, deny))
    assert p.can_subscribe(subject, queue) == reference_subscribe(p.subscribe, subject, queue)


@settings(max_examples=400, deadline=None)
@given(allow=st.one_of(st.none(), PLAIN), deny=st.one_of(st.none(), PLAIN),
       subject=subjects(wildcards=False))
def test_publish_decision_matches_the_reference(allow, deny, subject):
    p = Permissions(publish=Rules(allow, deny))
    assert p.can_publish(subject) == reference_publish(p.publish, subject)
    assert p.can_publish(subject) == reference_publish(p.publish, subject)  # cached
