"""Damage to one replica's raft log while Ray is down, the way users run it (see
damage_phases): bit flips, a cut to half, a damaged snapshot, on the leader or a follower,
and a durable consumer's log. The damaged replica rejoins empty and catches up; nothing
acknowledged is lost and no manual step is needed."""

from __future__ import annotations

import pytest

from tests.cluster.damage_phases import run_damage_cases

CASES = {  # stream -> (whose files, what damage)
    "WFL": ("leader", "wal_flips"),
    "WFF": ("follower", "wal_flips"),
    "SNF": ("follower", "snapshot_flips"),
    "WCF": ("follower", "wal_cut"),
    "WCL": ("leader", "wal_cut"),
}


@pytest.mark.timeout(900)  # two Ray starts and a dozen R3 streams on a busy machine
def test_one_damaged_raft_log_loses_nothing_and_rejoins(tmp_path, monkeypatch):
    run_damage_cases(tmp_path, monkeypatch, CASES, consumer=True)
