"""``examples/demo.py`` speaks for itself: run as a user runs it (a process of its own that
starts its own local Ray), everything it prints is its own, with nothing from Ray, Ray Data
or the raylet in between."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.py"
# what Ray, Ray Data, the raylet and the JVMs print when they are not quieted
NOISE = re.compile(
    r"^\d{4}-\d\d-\d\d[ T][\d:,.]+\s+(DEBUG|INFO|WARNING|ERROR)\b"   # Python logging (Ray's)
    r"|^\[\d{4}-\d\d-\d\d [\d:,.]+ [DIWE] \d+ \d+\]"                  # Ray's C++ core
    r"|^\d\d/\d\d/\d\d [\d:]+ (INFO|WARN|ERROR)\b"                    # Spark's log4j
    r"|\((raylet|pid=\d+)[^)]*\)"                                    # worker / raylet lines
    r"|Running Dataset|Starting execution of Dataset|execution finished in"
    r"|Started a local Ray instance|Token authentication"
)


def test_demo_prints_only_its_own_lines(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env["RAYJET_DATA_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True,
                          env=env, cwd=DEMO.parent.parent, timeout=240)
    out = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == "", f"the demo wrote to stderr:\n{proc.stderr}"
    noise = [line for line in out if NOISE.search(line)]
    assert not noise, "lines the demo did not print:\n" + "\n".join(noise)
    assert out[-1] == "demo finished"
    # each section the demo announces is there, in order
    sections = [line for line in out if line.startswith("== ")]
    assert sections == ["== subjects ==", "== connect (a local Ray is started for you) ==",
                        "== a replicated stream (R3, file storage) ==",
                        "== failover: kill the leader while publishing ==",
                        "== bad input gets a typed error with the NATS err_code =="]
