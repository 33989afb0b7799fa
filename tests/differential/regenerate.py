"""Writes the goldens: each client's scenarios against nats-server, run twice on fresh
servers, kept only when every scenario worked and both runs agree (an observation that
varies from run to run cannot be compared with the gateway's).

    python -m tests.differential.regenerate [client...]     (or: make goldens)
"""

from __future__ import annotations

import json
import sys

from benchmarks.natsbase import NatsServer, nats_server_version
from tests.differential.clients import CLIENTS, Client


def on_nats_server(client: Client) -> dict:
    client.ready()
    with NatsServer() as server:
        return client.observe(server.url, client.scenarios)


def regenerate(client: Client) -> None:
    first, second = on_nats_server(client), on_nats_server(client)
    failed = {k: v["failed"] for k, v in first.items() if "failed" in v}
    if failed:
        raise SystemExit(f"{client.name}: scenarios failed on nats-server: {failed}")
    varies = [k for k in first if first[k] != second.get(k)]
    if varies:
        raise SystemExit(f"{client.name}: observations vary between runs: {varies}")
    golden = {"made_with": {"client": client.version(), "nats-server": nats_server_version()},
              "observed": first}
    client.golden.parent.mkdir(exist_ok=True)
    client.golden.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    print(f"wrote {client.golden}")


def main(names: list[str]) -> None:
    unknown = set(names) - {c.name for c in CLIENTS}
    if unknown:
        raise SystemExit(f"unknown clients {sorted(unknown)}; known: {[c.name for c in CLIENTS]}")
    for client in CLIENTS:
        if not names or client.name in names:
            regenerate(client)


if __name__ == "__main__":
    main(sys.argv[1:])
