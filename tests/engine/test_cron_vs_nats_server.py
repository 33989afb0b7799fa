"""Cron schedules and time zones as nats-server 2.15.1 answers them: the same publishes sent
with nats.py to a nats-server started here and to the Python engine, accepted or refused with
the same err_code; and the Nats-Schedule-Next a zoned cron schedule's copy carries is written
as the engine writes it."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from benchmarks.natsbase import NatsServer, find_nats_server
from rayjet.engine.cron import format_in_zone, load_zone
from rayjet.engine.schedules import parse_ns
from rayjet.errors import APIError

from .conftest import Harness

pytestmark = pytest.mark.skipif(not find_nats_server(), reason="no nats-server binary")

T, Z = "Nats-Schedule-Target", "Nats-Schedule-Time-Zone"
# (Nats-Schedule or None, Nats-Schedule-Time-Zone or None); every one targets s.out.
# Not here: a field of only commas in the second/minute/hour/month position (", * * * * *"),
# which nats-server searches for five years of seconds before refusing (the engine refuses
# at once with 10189).
CASES = [
    ("0 * * * * *", None), ("* * * * *", None), ("*-5 * * * * *", None), ("+5 * * * * *", None),
    ("05 * * * * *", None), ("0 0 0 * * 7", None), ("0 0 0 0 * *", None),
    ("0 0 0 * jan-MAR mon", None), ("0 0 0 * * mon/2", None), ("0 0 0 * jan/feb *", None),
    ("0 0 0 30 2 *", None), ("0 0 0 ,, * *", None), ("1/0 * * * * *", None),
    ("1-2-3 * * * * *", None), ("0 0 0 1 1 ? ", None), (" 0  *  *  *  *  * ", None),
    ("@DAILY", None), ("@reboot", None), ("@weekly", None), ("@yearly", "Europe/Amsterdam"),
    ("@daily", "Europe/Amsterdam"), ("@every 5s", "UTC"), ("@at 2030-01-01T00:00:00Z", "UTC"),
    ("0 * * * * *", "UTC"), ("0 * * * * *", "Local"), ("0 * * * * *", "europe/amsterdam"),
    ("0 * * * * *", "Europe"), ("0 * * * * *", "Not/A/Zone"), ("0 * * * * *", ""),
    ("0 * * * * *", "../etc/passwd"), ("invalid", "Not/A/Zone"), ("invalid", "UTC"),
    (None, "Bad/Zone"), (None, "Asia/Kolkata"),
]


def _headers(pattern: str | None, zone: str | None) -> dict[str, str]:
    h = {T: "s.out"}
    if pattern is not None:
        h["Nats-Schedule"] = pattern
    if zone is not None:
        h[Z] = zone
    return h


def _engine_codes(clock, allow: bool) -> list[int]:
    h = Harness(clock, allow_msg_schedules=allow)
    out = []
    for pattern, zone in CASES:
        try:
            h.engine.prepare_publish("s.sched", b"", _headers(pattern, zone))
            out.append(0)
        except APIError as e:
            out.append(e.err_code)
    return out


async def _server_codes(url: str) -> tuple[list[int], list[int], str]:
    nc = await nats.connect(url)
    try:
        for name, allow in (("ON", True), ("OFF", False)):
            cfg = {"name": name, "subjects": [f"{name.lower()}.>"], "storage": "memory",
                   "allow_msg_schedules": allow}
            await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(cfg).encode(),
                             timeout=10)
        codes: dict[str, list[int]] = {"on": [], "off": []}
        for prefix, out in codes.items():
            for pattern, zone in CASES:
                h = _headers(pattern, zone)
                h[T] = f"{prefix}.out"
                msg = await nc.request(f"{prefix}.sched", b"", headers=h, timeout=10)
                out.append(json.loads(msg.data).get("error", {}).get("err_code", 0))
        # a zoned cron schedule firing every second: its copy's Nats-Schedule-Next
        sub = await nc.jetstream().subscribe("on.fired", ordered_consumer=True)
        await nc.request("on.tick", b"", timeout=10, headers={
            "Nats-Schedule": "* * * * * *", Z: "Asia/Kolkata", T: "on.fired"})
        fired = await sub.next_msg(timeout=10)
        return codes["on"], codes["off"], fired.headers["Nats-Schedule-Next"]
    finally:
        await nc.close()


def test_same_answers_as_nats_server(clock):
    with NatsServer() as server:
        on, off, nxt = asyncio.run(_server_codes(server.url))
    assert dict(zip(CASES, _engine_codes(clock, True), strict=True)) \
        == dict(zip(CASES, on, strict=True))
    assert dict(zip(CASES, _engine_codes(clock, False), strict=True)) \
        == dict(zip(CASES, off, strict=True))
    assert {10189, 10223, 0} <= set(on)  # the comparison covers each answer
    kolkata = load_zone("Asia/Kolkata")
    assert nxt.endswith("+05:30") and format_in_zone(parse_ns(nxt), kolkata) == nxt
