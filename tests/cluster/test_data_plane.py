"""Raft messages between replicas travel over the data plane (direct, authenticated TCP
connections between replica processes), Ray calls only as the fallback; a replica
restarted at another port is found again; a stranger at the port is refused."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
import ray

from rayjet import StorageType
from rayjet.dataplane import AuthError, client_handshake
from tests.replicas import kill, process_of, stream_replicas
from tests.waiting import wait_for


def statuses(js, name):
    return {rid: ray.get(h.status.remote(), timeout=30)
            for rid, h in stream_replicas(js, name).items()}


# a replica restarting does not answer: ask again
RESTARTING = (ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError)


def leader_of(sts):
    return next(rid for rid, st in sts.items() if st["role"] == "Leader")


def test_replicas_replicate_over_the_data_plane(js, stream_name, drop_new_streams):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3,
                  storage=StorageType.FILE)
    js.publish(f"{stream_name}.a", b"warm0")  # answered once a leader takes writes
    sent = [1]
    # replicas share host processes with earlier tests' replicas: count from here
    refused_before = {rid: st["data_plane"]["server"]["auth_failures"]
                      for rid, st in statuses(js, stream_name).items()}

    def leader_transport():
        sts = statuses(js, stream_name)
        return sts[leader_of(sts)]["transport"]

    def a_publish_without_actor_calls():
        # the first messages go by actor call while the peers' addresses are looked up
        before = leader_transport()["sent"]
        sent[0] += 1
        js.publish(f"{stream_name}.a", b"warm%d" % sent[0])
        return leader_transport()["sent"] == before

    wait_for(a_publish_without_actor_calls, 60, "raft messages leave by the data plane",
             retry_on=RESTARTING)
    before = leader_transport()
    for i in range(50):
        js.publish(f"{stream_name}.a", b"m%d" % i)
    n = sent[0] + 50
    sts = wait_for(lambda: (s := statuses(js, stream_name))
                   and all(st["last_seq"] == n for st in s.values()) and s,
                   60, f"every replica applied {n}", retry_on=RESTARTING)
    after = sts[leader_of(sts)]["transport"]
    # once the peers' addresses are known (the first messages go by actor call meanwhile)
    assert after["direct"] - before["direct"] >= 50
    assert after["sent"] == before["sent"]  # no actor call for a raft message
    for rid, st in sts.items():
        plane = st["data_plane"]
        assert plane["address"], rid
        assert plane["server"]["auth_failures"] == refused_before[rid], rid
        assert plane["delivered"] > 0, rid  # it took raft messages over a connection


def test_a_replica_restarted_at_another_port_is_found_again(js, stream_name,
                                                            drop_new_streams):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3,
                  storage=StorageType.FILE)
    for i in range(20):
        js.publish(f"{stream_name}.a", b"m%d" % i)
    sts = statuses(js, stream_name)
    follower = next(rid for rid, st in sts.items() if st["role"] != "Leader")
    old = tuple(sts[follower]["data_plane"]["address"])
    kill(stream_replicas(js, stream_name)[follower])
    for i in range(20, 120):
        js.publish(f"{stream_name}.a", b"m%d" % i, timeout=30)

    more = iter(range(120, 10_000))

    def caught_up_at_a_new_address():
        # traffic keeps the leader sending (a quiet group sends nothing to look up anew)
        js.publish(f"{stream_name}.a", b"m%d" % next(more), timeout=30)
        st = statuses(js, stream_name)[follower]
        plane = st.get("data_plane") or {}
        return (st["last_seq"] >= 120 and plane.get("address")
                and tuple(plane["address"]) != old and plane["delivered"] > 0)

    wait_for(caught_up_at_a_new_address, 60,
             f"{follower} restarted at another port and caught up", retry_on=RESTARTING)


def test_a_stranger_at_the_port_is_refused_and_the_stream_goes_on(js, stream_name,
                                                                  drop_new_streams):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3,
                  storage=StorageType.FILE)
    js.publish(f"{stream_name}.a", b"first")
    sts = statuses(js, stream_name)
    rid = leader_of(sts)
    host, port = sts[rid]["data_plane"]["address"]
    before = sts[rid]["data_plane"]["server"]

    async def wrong_secret():
        reader, writer = await asyncio.open_connection(host, port)
        try:
            await client_handshake(reader, writer, secret=b"not the cluster's secret",
                                   process_id="stranger", timeout=10)
        finally:
            writer.close()

    with pytest.raises(AuthError):
        asyncio.run(wrong_secret())
    with socket.create_connection((host, port), timeout=10) as s:  # bytes, not a protocol
        s.sendall(b"\xff" * 64 + b"PUB x 1\r\n")
        s.settimeout(10)
        while s.recv(4096):  # perhaps an ERROR frame; then the server closes (else: timeout)
            pass

    def refused_twice():
        now = statuses(js, stream_name)[rid]["data_plane"]["server"]
        return now["auth_failures"] + now.get("refused", 0) >= \
            before["auth_failures"] + before.get("refused", 0) + 2
    wait_for(refused_twice, 60, "both strangers counted", retry_on=RESTARTING)
    for i in range(20):
        js.publish(f"{stream_name}.a", b"after%d" % i)
    assert js.stream_info(stream_name).state.messages == 21


def _cut_connections(handle) -> None:
    """Cut every data-plane connection of the replica's process, both ways, mid-work."""
    def cut(_self):
        from rayjet.actors import data_plane
        data_plane.drop_connections()

    ray.get(process_of(handle).__ray_call__.remote(cut), timeout=30)


def test_connections_cut_mid_append_lose_and_double_nothing(js, stream_name,
                                                            drop_new_streams):
    """Connections cut again and again while publishes are in flight, on the leader's side
    and a follower's: every acknowledged message is stored once at its seq, and the
    replicas agree afterwards."""
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3,
                  storage=StorageType.FILE)
    js.publish(f"{stream_name}.a", b"m0", headers={"Nats-Msg-Id": "id0"})
    acked: dict[int, bytes] = {1: b"m0"}
    errors: list[BaseException] = []
    done = threading.Event()

    def publish() -> None:
        try:
            for i in range(1, 300):
                data = b"m%d" % i
                ack = js.publish(f"{stream_name}.a", data, timeout=30,
                                 headers={"Nats-Msg-Id": f"id{i}"})
                # a retry after a cut client connection may be answered as the duplicate
                # of its first copy: at that copy's seq, so counted once below
                acked[ack.seq] = data
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=publish)
    worker.start()
    cuts = 0
    while not done.is_set() and cuts < 12:
        handles = stream_replicas(js, stream_name)
        sts = statuses(js, stream_name)
        leader = leader_of(sts)
        follower = next(r for r in sts if r != leader)
        _cut_connections(handles[leader if cuts % 2 == 0 else follower])
        cuts += 1
        target = len(acked) + 20  # some publishes get through between cuts
        while not done.is_set() and len(acked) < target:
            done.wait(0.02)
    worker.join(120)
    assert not errors, errors
    assert cuts >= 3 and len(acked) == 300
    last = max(acked)

    def agreed():
        contents = []
        for h in stream_replicas(js, stream_name).values():
            got = ray.get(h.read_range.remote(1, last, max_msgs=10_000), timeout=60)
            contents.append(list(zip(got["seq"], got["data"], strict=True)))
        return all(c == contents[0] for c in contents) and len(contents[0]) == last \
            and contents[0]
    held = dict(wait_for(agreed, 60, "replicas agree on every message", retry_on=RESTARTING))
    assert held == acked  # each acknowledged message at its seq, nothing else, nothing twice
    # the cuts were real: the processes connected again, more than once each way at first
    reconnects = sum(st["data_plane"]["sender"]["connects"]
                     for st in statuses(js, stream_name).values())
    assert reconnects > 6, reconnects
