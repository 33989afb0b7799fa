"""Runs of new messages taken at once decide exactly what taking them one by one does."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayjet.clock import ManualClock
from rayjet.engine.consumer.engine import ConsumerEngine
from tests.engine.consumer.conftest import Consumer

STEPS = st.lists(st.one_of(
    st.tuples(st.just("pub"), st.integers(1, 12)),
    st.tuples(st.just("fetch"), st.integers(1, 9)),
    st.tuples(st.just("pull"), st.integers(1, 9)),
    st.tuples(st.just("pull2"), st.integers(1, 5)),
    st.tuples(st.just("ack"), st.integers(0, 40)),
    st.tuples(st.just("nak"), st.integers(0, 40)),
    st.tuples(st.just("tick"), st.integers(1, 3)),
), max_size=40)

CONFIGS = st.sampled_from([
    {"ack_policy": "explicit"},
    {"ack_policy": "explicit", "max_ack_pending": 5},
    {"ack_policy": "all", "filter_subject": "ORDERS.a"},
    {"ack_policy": "none"},
    {"ack_policy": "explicit", "filter_subjects": ("ORDERS.a", "ORDERS.c"), "max_deliver": 2},
    {"ack_policy": "explicit", "headers_only": True},
])


def run(steps, cfg: dict) -> list:
    c = Consumer(ManualClock(), followers=1, ack_wait=1.0, **cfg)
    seen: list = []
    subjects = ["ORDERS.a", "ORDERS.b", "ORDERS.c"]
    for n, (kind, arg) in enumerate(steps):
        if kind == "pub":
            for i in range(arg):
                c.pub(subjects[(c.store.fast_state().last_seq + i) % 3], b"%d" % i)
        elif kind == "fetch":
            b = c.engine.next_batch(c.now, arg)
            c.take(b)
            seen.append(b.deliveries)
        elif kind in ("pull", "pull2"):
            replies = [f"r{n}"] if kind == "pull" else [f"r{n}a", f"r{n}b"]
            for reply in replies:
                b = c.request(arg, reply=reply, no_wait=True, expires=1.0)
                seen.append((b.deliveries, b.statuses, b.stalled))
        elif kind == "ack" and cfg["ack_policy"] != "none":
            c.ack(arg) if arg in c.engine.view.pending else None
        elif kind == "nak" and cfg["ack_policy"] != "none":
            c.nak(arg) if arg in c.engine.view.pending else None
        elif kind == "tick":
            c.tick(arg * 0.5)
        seen.append((c.engine.state.to_doc(), c.replicas_agree()))
    return seen


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(steps=STEPS, cfg=CONFIGS)
def test_runs_decide_what_single_takes_decide(steps, cfg, monkeypatch):
    with monkeypatch.context() as mp:
        mp.setattr(ConsumerEngine, "_take_run", lambda self, rnd, want, reply: 0)
        single = run(steps, cfg)
    assert run(steps, cfg) == single
