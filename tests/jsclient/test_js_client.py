"""The JavaScript NATS client (``@nats-io/*`` 3.4, pinned in ``package.json``) against
nats-server and against the gateway: the same scenarios (``scenarios.mjs``), what a user
observes of each compared whole. The npm packages are installed here on first use."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.natsbase import NatsServer
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401

HERE = Path(__file__).parent
SCENARIOS = ["consume", "fetch", "ordered", "kv", "obj", "shapes", "errors"]
PREFIX = "JSC"  # the same names on both servers


def _installed() -> None:
    if (HERE / "node_modules" / "@nats-io" / "jetstream").is_dir():
        return
    npm = shutil.which("npm")
    assert npm, "the JavaScript client tests need node and npm"
    subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True, timeout=600,
                   capture_output=True)


def _observed(url: str, scenarios: list[str]) -> dict:
    node = shutil.which("node")
    assert node, "the JavaScript client tests need node and npm"
    done = subprocess.run([node, "scenarios.mjs", url, PREFIX, *scenarios], cwd=HERE,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def on_nats_server() -> dict:
    _installed()
    with NatsServer() as server:
        return _observed(server.url, SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_javascript_client_observes_what_it_does_on_nats_server(
        gateway, on_nats_server, drop_new_streams, scenario):  # noqa: F811
    expected = on_nats_server[scenario]
    assert "failed" not in expected, expected  # the scenario itself works on nats-server
    gw = gateway()
    got = _observed(f"nats://127.0.0.1:{gw.port}", [scenario])[scenario]
    assert got == expected
