"""Damage to one replica's store while Ray is down, the way users run it (see
damage_phases): bit flips in every block, the first block cut to half, the last one cut,
on the leader or a follower. The replica keeps what precedes the first damaged message and
copies the rest from a peer; nothing acknowledged is lost and no manual step is needed."""

from __future__ import annotations

import pytest

from tests.cluster.damage_phases import run_damage_cases

CASES = {  # stream -> (whose files, what damage)
    "BFL": ("leader", "block_flips"),
    "BFF": ("follower", "block_flips"),
    "FCF": ("follower", "first_block_cut"),
    "FCL": ("leader", "first_block_cut"),
    "LCL": ("leader", "last_block_cut"),
}


@pytest.mark.timeout(900)  # two Ray starts and a dozen R3 streams on a busy machine
def test_one_damaged_store_loses_nothing_and_repairs(tmp_path, monkeypatch):
    run_damage_cases(tmp_path, monkeypatch, CASES)
