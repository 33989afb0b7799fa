"""What accounts and permissions cost on the core NATS path: nats-py publishes 16 B
messages that a subscriber of the same connection receives, through a gateway without
authentication and through one whose user has publish and subscribe allow/deny lists, and
the same two set-ups on nats-server, measured in one run (best of three each).

    .venv/bin/python benchmarks/permissions.py [--messages 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nats  # noqa: E402

from benchmarks.natsbase import find_nats_server, free_port  # noqa: E402
from rayjet.gateway.embedded import GatewayThread  # noqa: E402
from rayjet.gateway.server import GatewayOptions  # noqa: E402

CONFIG = """accounts { A: { users: [ {user: u, password: p, permissions: {
  publish: {allow: ["orders.>", "_INBOX.>"], deny: ["orders.secret.>"]},
  subscribe: {allow: ["orders.>", "_INBOX.>"], deny: ["orders.secret"]} }} ] } }"""


async def rate(port: int, n: int, **creds) -> float:
    nc = await nats.connect(f"nats://127.0.0.1:{port}", **creds)
    got, done = 0, asyncio.Event()

    async def cb(_msg):
        nonlocal got
        got += 1
        if got == n:
            done.set()

    await nc.subscribe("orders.*", cb=cb)
    await nc.flush()
    start = time.perf_counter()
    for i in range(n):
        await nc.publish(f"orders.{i % 1000}", b"x" * 16)
    await asyncio.wait_for(done.wait(), 300)
    elapsed = time.perf_counter() - start
    await nc.close()
    return n / elapsed


def on_gateway(n: int, config: str | None, **creds) -> float:
    best = 0.0
    for _ in range(3):
        gw = GatewayThread(None, GatewayOptions(port=0, config=config))
        gw.start()
        try:
            best = max(best, asyncio.run(rate(gw.port, n, **creds)))
        finally:
            gw.stop()
    return best


def on_nats_server(n: int, config: str | None, **creds) -> float:
    best = 0.0
    for _ in range(3):
        port = free_port()
        args = [find_nats_server(), "-a", "127.0.0.1", "-p", str(port)]
        proc = subprocess.Popen(args + (["-c", config] if config else []),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 15
            while True:  # until it listens
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            best = max(best, asyncio.run(rate(port, n, **creds)))
        finally:
            proc.kill()
            proc.wait()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    n = ap.parse_args().messages
    conf = Path(tempfile.mkdtemp()) / "server.conf"
    conf.write_text(CONFIG)
    creds = {"user": "u", "password": "p"}
    rows = [("no authentication", on_gateway(n, None), on_nats_server(n, None)),
            ("a user with permission lists", on_gateway(n, str(conf), **creds),
             on_nats_server(n, str(conf), **creds))]
    print(f"{n:,} publishes of 16 B, each received by a subscriber (msg/s, best of 3)")
    print("| set-up | rayjet gateway | nats-server | ratio |")
    print("|---|---|---|---|")
    for label, ours, theirs in rows:
        print(f"| {label} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f}x |")
    print(f"permissions cost the gateway {1 - rows[1][1] / rows[0][1]:.0%} of its rate, "
          f"nats-server {1 - rows[1][2] / rows[0][2]:.0%} of its")


if __name__ == "__main__":
    main()
