"""The clients of the differential suite and their goldens.

Each client runs its scenarios as a process of its own against a NATS URL and prints one
JSON document, scenario -> what a user observed. A golden (``goldens/<client>.json``) holds
nats-server's observations; ``python -m tests.differential.regenerate`` writes them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).parent
GOLDENS = HERE / "goldens"
SCENARIOS = ("consume", "fetch", "ordered", "kv", "obj", "shapes", "errors")


def _tool(name: str) -> str:
    found = shutil.which(name)
    assert found, "the JavaScript client's scenarios need node and npm"
    return found


@dataclass(frozen=True)
class Client:
    name: str  # the golden's file name
    prefix: str  # of the streams and buckets its scenarios make: the same on every server
    scenarios: tuple[str, ...] = SCENARIOS

    @property
    def golden(self) -> Path:
        return GOLDENS / f"{self.name}.json"

    def ready(self) -> None:
        """Installs what the client needs to run (the JavaScript client's npm packages)."""
        if self.name != "javascript" or (HERE / "node_modules/@nats-io/jetstream").is_dir():
            return
        subprocess.run([_tool("npm"), "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True,
                       timeout=600, capture_output=True)

    def command(self, url: str, scenarios: list[str]) -> list[str]:
        if self.name == "javascript":
            return [_tool("node"), "js_scenarios.mjs", url, self.prefix, *scenarios]
        return [sys.executable, "natspy_scenarios.py", url, self.prefix, *scenarios]

    def version(self) -> str:
        if self.name == "javascript":
            return "@nats-io/jetstream " + json.loads(
                (HERE / "package.json").read_text())["dependencies"]["@nats-io/jetstream"]
        return "nats-py " + version("nats-py")

    def observe(self, url: str, scenarios: list[str] | tuple[str, ...],
                user: str | None = None, password: str | None = None) -> dict:
        env = {**os.environ, **({"NATS_USER": user, "NATS_PASSWORD": password or ""}
                                if user else {})}
        done = subprocess.run(self.command(url, list(scenarios)), cwd=HERE, capture_output=True,
                              text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    def load_golden(self) -> dict:
        """``{"made_with": {...}, "observed": {scenario: observation}}``."""
        return json.loads(self.golden.read_text())


CLIENTS = (Client("natspy", "NPY"), Client("javascript", "JSC"))


def differences(got, expected, at: str = "") -> list[str]:
    """Where two observations part, one line per leaf: ``path: got != expected``."""
    if isinstance(got, dict) and isinstance(expected, dict):
        return [line for k in sorted(set(got) | set(expected), key=str)
                for line in differences(got.get(k, "<absent>"), expected.get(k, "<absent>"),
                                        f"{at}.{k}" if at else str(k))]
    if isinstance(got, list) and isinstance(expected, list) and len(got) == len(expected):
        return [line for i, (g, e) in enumerate(zip(got, expected, strict=True))
                for line in differences(g, e, f"{at}[{i}]")]
    return [] if got == expected else [f"{at}: {got!r} != {expected!r}"]
