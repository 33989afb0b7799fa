"""Smoke test of benchmarks/publish.py: tiny counts, R1 memory only, on the session's Ray."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import natsbase as nb  # noqa: E402
from benchmarks import publish as pb  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def _has_nats() -> bool:
    try:
        import nats  # noqa: F401
    except ImportError:
        return False
    return nb.find_nats_server() is not None


def test_publish_benchmark_smoke(ray_session, tmp_path):
    with_nats = _has_nats()
    res = pb.run(pb.Counts.smoke(), ["R1 memory"], with_nats=with_nats, with_failover=False,
                 data_dir=str(tmp_path), log=lambda *a: None)
    assert set(res.floor) == {pb.FLOOR_SYNC, pb.FLOOR_ASYNC, pb.FLOOR_HOPS}
    for lat in res.floor.values():
        assert 0 < lat.p50_us <= lat.p99_us
    r = res.setups["R1 memory"]
    assert r.sync.stored == r.sync.count == 20
    assert r.batch.stored == r.batch.count and r.batch.extra["errors"] == 0
    assert r.async_.stored == r.async_.count and r.async_.extra["errors"] == 0
    assert r.table.stored == r.table.count == 3000 and r.table.extra["errors"] == 0
    if with_nats:
        assert r.nats_sync is not None and r.nats_sync.stored == r.nats_sync.count
        assert r.nats_async is not None and r.nats_async.stored == r.nats_async.count
    text = pb.report(res)
    assert "R1 memory: sync publish p50" in text
    assert "every published message stored" in text


def test_targets_table_from_figures():
    lat = nb.Latency("x", 10, 128, 100.0, 200.0, 120.0, 1000.0, 10)

    def thr(v):
        return nb.Throughput("x", 10, 128, 1.0, v, 10)

    res = pb.Results(
        setups={
            "R1 file": pb.SetupResult("R1 file", lat, thr(300_000), thr(100_000), lat, thr(50_000),
                                      thr(900_000)),
            "R3 file": pb.SetupResult("R3 file", lat, thr(90_000), thr(60_000), lat, thr(30_000)),
        },
        failover_s=[1.0, 2.5, 1.5],
    )
    rows = {line.split("|")[1].strip(): line.split("|")[3].strip()
            for line in pb.targets(res).splitlines()[2:]}
    assert rows["publish_batch R1 file >= 5x nats-py async R1 file"] == "yes"  # 6x
    assert rows["publish_async R1 file >= 5x nats-py async R1 file"] == "no"  # 2x
    assert rows["publish_batch R3 file >= 3x nats-py async R3 file"] == "yes"  # 3x
    assert rows["publish_async R3 file >= 3x nats-py async R3 file"] == "no"  # 2x
    assert rows["failover median < 2 s"] == "yes"  # median 1.5 s
    assert rows["issue 18: publish_batch(table) R1 file >= 20x nats-py async R1 file"] == "no"
    assert rows["issue 18: publish_batch(list) R1 file >= 10x nats-py async R1 file"] == "no"
    assert rows["issue 18: publish_batch(list) R3 file >= 5x nats-py async R3 file"] == "no"
    assert "issue 18: publish_batch(table) R3 file >= 5x nats-py async R3 file" not in rows
