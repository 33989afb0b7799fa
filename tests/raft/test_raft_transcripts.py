"""Run every ``tests/raft/*.txt`` scenario and compare the output line by line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from raft_transcript import Env, parse, render

HERE = Path(__file__).parent
FILES = sorted(HERE.glob("*.txt"))


def test_there_are_enough_scenarios() -> None:
    assert len(FILES) >= 8


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_transcript(path: Path) -> None:
    text = path.read_text()
    blocks = parse(text)
    env = Env()
    for b in blocks:
        b.actual = env.run(b.command)
    if os.environ.get("RAYJET_REWRITE_TRANSCRIPTS"):
        path.write_text(render(text, blocks))
        return
    for b in blocks:
        assert b.actual == b.expected, (
            f"{path.name}:{b.line}: {b.command}\n--- expected\n" + "\n".join(b.expected)
            + "\n--- actual\n" + "\n".join(b.actual))
