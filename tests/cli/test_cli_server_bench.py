"""`rayjet server ...` (status for real; start/stop only their argument checks) and bench."""

from __future__ import annotations

import pytest


def test_server_status(cli):
    status = cli.json("server", "status")
    assert status["nodes"] and all("labels" in n for n in status["nodes"])
    assert isinstance(status["streams"], list)
    assert "Ray nodes" in cli("server", "status").stdout


def test_server_start_stop_validate_arguments(cli):
    for args in (["server", "start", "--port", "0"], ["server", "start", "--num-cpus", "0"],
                 ["server", "start", "--label", "novalue"],
                 ["server", "start", "--label", "ray.io/x=1"],
                 ["server", "stop", "--grace-period", "-1"], ["server", "stop", "--bogus"],
                 ["server", "restart"]):
        cli(*args, code=2)


def test_bench_pub_and_sub(cli):
    res = cli.json("bench", "pub", "--msgs", "30", "--size", "16", "--size", "64",
                   "--storage", "memory")
    assert [r["size"] for r in res["results"]] == [16, 64]
    for r in res["results"]:
        assert r["rayjet"]["stored"] == 30 and r["rayjet"]["p50_us"] > 0
    res = cli.json("bench", "sub", "--msgs", "30", "--batch", "10", "--storage", "memory")
    assert res["results"][0]["rayjet"]["stored"] == 30
    cli("bench", "pub", "--async", "--batch", "5", code=2)
    cli("bench", "pub", "--replicas", "7", code=2)


def test_bench_compare_nats(cli):
    pytest.importorskip("nats")
    from benchmarks.natsbase import find_nats_server

    if not find_nats_server():
        pytest.skip("no nats-server binary")
    out = cli("bench", "pub", "--msgs", "30", "--size", "32", "--storage", "memory",
              "--batch", "10", "--compare-nats").stdout
    assert "rayjet publish_batch(10)" in out and "nats publish_async" in out and "x" in out


def test_bench_kv_and_object(cli):
    res = cli.json("bench", "kv", "--ops", "20", "--size", "16", "--storage", "memory")
    put, get = res["rayjet"]
    assert put["name"] == "rayjet kv put" and put["stored"] == 20 and put["p50_us"] > 0
    assert get["msgs_per_s"] > 0
    res = cli.json("bench", "object", "--size", "300000", "--storage", "memory")
    assert [r["name"] for r in res["rayjet"]] == ["rayjet object put", "rayjet object get"]
    assert all(r["mb_per_s"] > 0 for r in res["rayjet"])
    cli("bench", "kv", "--ops", "0", code=2)
