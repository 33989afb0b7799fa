"""``rayjet bench kv|object``: key-value put/get and object put/get, optionally beside
nats-server measured in the same run (``--compare-nats``)."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import Annotated, Any

import typer

from rayjet.api import KeyValueConfig, ObjectStoreConfig, StorageType
from rayjet.cli import common as c
from rayjet.cli.bench import (
    Compare,
    Replicas,
    Storage,
    _num,
    app,
    nats_servers,
    natsbase,
    ratio,
    summary,
)


def _timed(fn, count: int) -> tuple[float, list[float]]:
    lat: list[float] = []
    started = time.perf_counter()
    for i in range(count):
        t = time.perf_counter()
        fn(i)
        lat.append((time.perf_counter() - t) * 1e6)
    return time.perf_counter() - started, lat


def rj_kv(js: Any, ops: int, size: int, storage: str, replicas: int) -> list[dict[str, Any]]:
    bucket = f"bench{uuid.uuid4().hex[:8]}"
    kv = js.create_key_value(KeyValueConfig(bucket=bucket, storage=StorageType(storage),
                                            replicas=replicas))
    value = os.urandom(size)
    try:
        put_s, put_lat = _timed(lambda i: kv.put(f"k{i % 100}", value), ops)
        get_s, get_lat = _timed(lambda i: kv.get(f"k{i % 100}"), ops)
        return [summary("rayjet kv put", ops, size, put_s, put_lat, ops),
                summary("rayjet kv get", ops, size, get_s, get_lat, ops)]
    finally:
        with contextlib.suppress(Exception):
            js.delete_key_value(bucket)


def rj_object(js: Any, size: int, storage: str, replicas: int) -> list[dict[str, Any]]:
    bucket = f"bench{uuid.uuid4().hex[:8]}"
    obs = js.create_object_store(ObjectStoreConfig(bucket=bucket, storage=StorageType(storage),
                                                   replicas=replicas))
    data = os.urandom(size)
    try:
        put_s, _ = _timed(lambda i: obs.put("blob", data), 1)
        got: dict[str, bytes] = {}
        get_s, _ = _timed(lambda i: got.setdefault("v", obs.get("blob").data), 1)
        if got["v"] != data:
            raise c.usage_error("object read back differs from what was written")
        return [{"name": "rayjet object put", "seconds": put_s, "mb_per_s": size / put_s / 1e6},
                {"name": "rayjet object get", "seconds": get_s, "mb_per_s": size / get_s / 1e6}]
    finally:
        with contextlib.suppress(Exception):
            js.delete_object_store(bucket)


def _table(title: str, rows: list[tuple[str, float, float | None, str]]) -> None:
    body = [(name, _num(ours, 1), _num(theirs, 1),
             "-" if theirs is None else f"{ratio(ours, theirs):.2f}x")
            for name, ours, theirs, _unit in rows]
    c.print_renderables(c.list_table(["figure", "rayjet", "nats-server", "ratio (>1: rayjet)"],
                                     body, right=[1, 2, 3], title=title))


@c.command(app, "kv")
def kv(ops: Annotated[int, typer.Option("--ops", min=1, help="puts, then as many gets")] = 1000,
       size: Annotated[int, typer.Option("--size", min=0, help="value bytes")] = 128,
       replicas: Replicas = 1, storage: Storage = "file", compare: Compare = False) -> None:
    """Key-value put and get: ops/s and latency percentiles (sync calls)."""
    if compare:
        natsbase()
    ours = rj_kv(c.connect(), ops, size, storage, replicas)
    theirs = None
    if compare:
        with nats_servers(replicas) as urls:
            put, get = natsbase().kv_put_get(urls, size=size, count=ops, storage=storage,
                                             replicas=replicas)
            theirs = [put, get]
    if c.wants_json():
        c.emit_json({"bench": "kv", "rayjet": ours,
                     "nats": [t.as_dict() for t in theirs] if theirs else None})
        return
    rows = []
    for i, name in enumerate(("put", "get")):
        t = theirs[i] if theirs else None
        rows.append((f"{name} ops/s", ours[i]["msgs_per_s"], t.msgs_per_s if t else None, ""))
        rows.append((f"{name} p50 us", ours[i]["p50_us"], t.p50_us if t else None, ""))
    _table(f"kv, {ops} ops, {size} B values, R{replicas} {storage}", rows)


@c.command(app, "object")
def obj(size: Annotated[int, typer.Option("--size", min=1, help="object bytes")] = 8 << 20,
        replicas: Replicas = 1, storage: Storage = "file", compare: Compare = False) -> None:
    """Object put and get of one object: MB/s."""
    if compare:
        natsbase()
    ours = rj_object(c.connect(), size, storage, replicas)
    theirs = None
    if compare:
        with nats_servers(replicas) as urls:
            theirs = natsbase().object_put_get(urls, size=size, storage=storage,
                                               replicas=replicas)
    if c.wants_json():
        c.emit_json({"bench": "object", "rayjet": ours,
                     "nats": [t.as_dict() for t in theirs] if theirs else None})
        return
    rows = [(f"{name} MB/s", ours[i]["mb_per_s"], theirs[i].mb_per_s if theirs else None, "")
            for i, name in enumerate(("put", "get"))]
    _table(f"object, {size:,} B, R{replicas} {storage}", rows)
