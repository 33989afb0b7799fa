"""Helpers for the multi-node tests: where replicas run, what a stream holds, a publisher."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import ray
from ray.exceptions import RayError

from rayjet.actors.host import hosted_on
from rayjet.actors.names import stream_actor_name
from rayjet.api import headers as H
from rayjet.errors import APIError
from tests.multinode.conftest import wait_for
from tests.replicas import stream_replicas


def assignment(js, name: str) -> dict[str, Any]:
    return js._stream(name, refresh=True)[0]


def replica_nodes(js, name: str) -> dict[str, str]:
    """Replica id -> node id of every replica actor of ``name`` that is alive now."""
    a = assignment(js, name)
    wanted = {}  # the actor running each replica (its own, or its host) -> replica id
    for rid, _node in a["peers"]:
        replica = stream_actor_name(a["group"], rid)
        try:
            wanted[hosted_on(replica) or replica] = rid
        except Exception:  # noqa: BLE001 - the control store is restarting: not yet
            continue
    # the GCS actor table (the state API would need the dashboard, which these nodes skip)
    out = {}
    for info in ray._private.state.actors().values():
        if info["Name"] in wanted and info["State"] == "ALIVE":
            out[wanted[info["Name"]]] = info["Address"]["NodeID"]
    return out


def node_labels() -> dict[str, dict[str, str]]:
    return {n["NodeID"]: dict(n.get("Labels") or {}) for n in ray.nodes() if n.get("Alive")}


def replica_labels(js, name: str) -> dict[str, dict[str, str]]:
    """Replica id -> labels of the node it runs on (alive replicas only)."""
    labels = node_labels()
    return {rid: labels.get(node, {}) for rid, node in replica_nodes(js, name).items()}


def all_placed(js, name: str, replicas: int) -> dict[str, dict[str, str]] | None:
    got = replica_labels(js, name)
    return got if len(got) == replicas and all(got.values()) else None


def handles(js, name: str) -> dict[str, Any]:
    assignment(js, name)  # refresh the client's view first
    return stream_replicas(js, name, running_only=True)


def statuses(js, name: str, timeout: float = 2.0) -> dict[str, dict | None]:
    found = handles(js, name)
    out: dict[str, dict | None] = {rid: None for rid, _ in assignment(js, name)["peers"]}
    for rid, h in found.items():
        try:
            out[rid] = ray.get(h.status.remote(), timeout=timeout)
        except RayError:
            out[rid] = None  # restarting, or waiting for a node of its region
    return out


def leader(js, name: str, timeout: float = 30.0) -> tuple[str, Any]:
    def find():
        for rid, st in statuses(js, name).items():
            if st and st["role"] == "Leader" and st.get("writable"):
                return rid
        return None

    rid = wait_for(find, timeout, f"a leader of {name}")
    return rid, handles(js, name)[rid]


def contents(js, name: str) -> list[tuple[int, str, bytes, dict]]:
    """(seq, subject, data, headers) of every message, read from the stream's leader."""
    _rid, h = leader(js, name)
    out, start = [], 1
    while start:
        got = ray.get(h.read_range.remote(start, 1 << 62, max_msgs=100_000), timeout=60)
        out += [(s, subj, d, H.decode_headers(hd)) for s, subj, d, hd in
                zip(got["seq"], got["subject"], got["data"], got["hdr"], strict=True)]
        start = got["next"]
    return out


def msg_ids(js, name: str) -> Counter:
    return Counter(hdrs.get("Nats-Msg-Id") for _s, _subj, _d, hdrs in contents(js, name))


class Publisher(threading.Thread):
    """Publishes ``subject`` messages with unique Nats-Msg-Ids until stopped, retrying each
    one (same id) until it is acknowledged: ``acked`` ends up with every id sent."""

    def __init__(self, js, subject: str, prefix: str, pause: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.js, self.subject, self.prefix, self.pause = js, subject, prefix, pause
        self.acked: dict[str, int] = {}
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._halt.is_set():
            mid = f"{self.prefix}-{n}"
            while True:
                try:
                    ack = self.js.publish(self.subject, mid.encode(),
                                          headers={"Nats-Msg-Id": mid}, timeout=10)
                    self.acked[mid] = ack.seq
                    break
                except (APIError, RayError) as err:
                    self.errors.append(type(err).__name__)
                    time.sleep(0.05)
            n += 1
            time.sleep(self.pause)

    def stop(self) -> dict[str, int]:
        self._halt.set()
        self.join(timeout=60)
        assert not self.is_alive(), "the publisher is stuck"
        return self.acked

    def wait_count(self, count: int, timeout: float = 30.0) -> None:
        wait_for(lambda: len(self.acked) >= count, timeout, f"{count} acks on {self.subject}")


def assert_exactly_once(js, name: str, acked: dict[str, int]) -> None:
    """Every acknowledged id is in the stream exactly once, at the sequence its ack gave,
    and nothing else is there."""
    ids = msg_ids(js, name)
    dups = {k: c for k, c in ids.items() if c > 1}
    assert not dups, f"duplicated: {dups}"
    assert set(ids) == set(acked), (f"missing {sorted(set(acked) - set(ids))[:10]}, "
                                    f"unexpected {sorted(set(ids) - set(acked))[:10]}")
    by_id = {hdrs.get("Nats-Msg-Id"): seq for seq, _s, _d, hdrs in contents(js, name)}
    assert by_id == acked
