"""Run a script in phases, each in a process of its own with a Ray of its own over the same
data dir: what a full Ray restart between the phases looks like to rayjet."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def run_phases(tmp_path: Path, script: str, phases: Sequence[str], timeout: float = 300
               ) -> str:
    """Run ``script`` (argv: the data dir, the phase) once per phase; their stdout joined.
    A phase that fails fails the test with the ends of its output."""
    path = tmp_path / "phase.py"
    path.write_text(script)
    data_dir = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": ":".join(sys.path)}
    env.pop("RAY_ADDRESS", None)
    out = ""
    for phase in phases:
        proc = subprocess.run([sys.executable, str(path), str(data_dir), phase],
                              capture_output=True, text=True, timeout=timeout, env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        out += proc.stdout
    return out
