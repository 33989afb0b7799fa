"""The simulator's seed budget: no invariant violation, deterministic replay, and proof
that it notices when a safety rule is switched off."""

from __future__ import annotations

import re

import pytest

from rayjet.raft import MUTATIONS
from rayjet.sim import run_seed
from rayjet.sim.__main__ import main

SEEDS = range(300)


def test_300_seeds_without_a_violation() -> None:
    failures = []
    for seed in SEEDS:
        r = run_seed(seed)
        if not r.ok:
            failures.append(f"seed {seed} ({r.phase}, tick {r.tick}): {r.error}")
    assert not failures, "\n".join(failures) + "\nreplay: python -m rayjet.sim --seed N --trace"


def test_a_seed_replays_exactly() -> None:
    first: list[str] = []
    second: list[str] = []
    a = run_seed(11, trace=first.append)
    b = run_seed(11, trace=second.append)
    assert a.ok and b.ok
    assert len(first) > 100
    assert first == second


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_each_mutation_is_caught_within_the_default_budget(mutation: str) -> None:
    for seed in range(1000):
        r = run_seed(seed, mutation)
        if not r.ok:
            assert r.error and ("committed" in r.error or "leader" in r.error), r.error
            assert run_seed(seed).ok  # the same schedule is fine with the rule in place
            return
    pytest.fail(f"mutation {mutation} survived 1000 seeds")


def test_cli_runs_seeds_and_reports_a_failing_seed(capsys) -> None:
    assert main(["--seeds", "3"]) == 0
    assert "zero invariant violations" in capsys.readouterr().out
    assert main(["--seeds", "8", "--mutation", "vote-without-log-check"]) == 1
    replay = re.search(r"--seed (\d+) --trace --mutation vote-without-log-check",
                       capsys.readouterr().out)
    assert replay, "no failing seed reported"
    seed = replay.group(1)
    assert main(["--seed", seed, "--mutation", "vote-without-log-check"]) == 1
    assert f"seed {seed}: FAILED" in capsys.readouterr().out


def test_cli_trace_prints_the_run(capsys) -> None:
    assert main(["--seed", "3", "--trace", "--ticks", "40"]) == 0
    out = capsys.readouterr().out
    assert "deliver" in out and "LIVENESS" in out
