"""Acknowledged data survives leader kills and restarts; a lost quorum refuses writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import ray

from rayjet import StorageType
from rayjet.errors import ServiceUnavailableError
from tests.replicas import kill, pid, stream_replicas


def replica_handles(js, name):
    js._stream(name, refresh=True)
    return stream_replicas(js, name)


def leader_id(js, name):
    for rid, handle in replica_handles(js, name).items():
        try:
            st = ray.get(handle.status.remote(), timeout=30)
        except ray.exceptions.ActorUnavailableError:
            continue  # restarting after an earlier kill: not the leader now
        if st["role"] == "Leader":
            return rid
    return None


def replica_contents(handle, last_seq):
    got = ray.get(handle.read_range.remote(1, last_seq, max_msgs=100_000), timeout=60)
    return list(zip(got["seq"], got["data"], strict=True))


def wait_replicas_equal(js, name, last_seq, timeout=60):
    """Every replica holds exactly the messages up to last_seq (followers catch up)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        handles = replica_handles(js, name)
        try:
            contents = {rid: replica_contents(h, last_seq) for rid, h in handles.items()}
        except ray.exceptions.ActorUnavailableError:
            contents = {}  # one is still restarting after a kill: ask again
        values = list(contents.values())
        if (values and all(v == values[0] for v in values) and values[0]
                and values[0][-1][0] == last_seq):
            return values[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"replicas differ: { {r: len(v) for r, v in contents.items()} }"
                                 f"; their status: {_statuses(handles)}")
        time.sleep(0.2)


def _statuses(handles) -> dict:
    """What each replica says of itself: why one did not catch up."""
    out = {}
    for rid, handle in handles.items():
        try:
            st = ray.get(handle.status.remote(), timeout=30)
        except Exception as exc:  # noqa: BLE001 - a failure's report must not fail
            out[rid] = repr(exc)
            continue
        out[rid] = {k: v for k, v in st.items()
                    if k not in ("store_recovery", "node")}
    return out


def test_killing_the_leader_loses_no_acked_message(js, stream_name):
    name = stream_name
    js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=3, storage=StorageType.FILE)
    try:
        acked: dict[int, bytes] = {}
        kills = 0
        for i in range(120):
            if i in (30, 60, 90):
                victim = leader_id(js, name)
                kill(replica_handles(js, name)[victim])
                kills += 1
            data = b"msg-%d" % i
            try:
                ack = js.publish(f"{name}.a", data, headers={"Nats-Msg-Id": f"id-{i}"},
                                 timeout=30)
            except Exception as exc:
                raise AssertionError(f"publish {i} failed: {exc!r}; the replicas: "
                                     f"{_statuses(replica_handles(js, name))}") from exc
            assert ack.seq not in acked, "two messages acked at the same sequence"
            acked[ack.seq] = data
        assert kills == 3
        assert sorted(acked.values()) == sorted(b"msg-%d" % i for i in range(120))
        last = js.stream_info(name).state.last_seq
        stored = wait_replicas_equal(js, name, last)
        by_seq = dict(stored)
        for seq, data in acked.items():
            assert by_seq[seq] == data  # at its acked sequence, on every replica
        assert sorted(by_seq.values()) == sorted(acked.values())  # and exactly once
    finally:
        js.delete_stream(name)


def test_a_stream_without_quorum_refuses_writes_instead_of_hanging(js, stream_name):
    name = stream_name
    js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=3,
                  storage=StorageType.MEMORY)
    try:
        js.publish(f"{name}.a", b"before")
        handles = replica_handles(js, name)
        leader = leader_id(js, name)
        # paused, not killed: nothing re-creates them, so the quorum stays lost
        paused = [pid(handles[rid]) for rid in handles if rid != leader]
        for p in paused:
            os.kill(p, signal.SIGSTOP)
        try:
            with pytest.raises(ServiceUnavailableError):
                js.publish(f"{name}.a", b"after", timeout=3)
        finally:
            for p in paused:
                os.kill(p, signal.SIGCONT)
    finally:
        js.delete_stream(name)


RESTART_SCRIPT = textwrap.dedent("""
    import sys, rayjet
    from rayjet import StorageType
    data_dir, phase = sys.argv[1], sys.argv[2]
    with rayjet.connect(data_dir=data_dir, num_cpus=2, timeout=30,
                        ray_init_kwargs={"include_dashboard": False}) as js:
        if phase == "write":
            js.add_stream(name="KEEP", subjects=["keep.*"], num_replicas=3,
                          storage=StorageType.FILE)
            for i in range(50):
                js.publish("keep.a", b"m%d" % i)
            js.delete_msg("KEEP", 7)
        else:
            info = js.stream_info("KEEP")
            assert info.config.num_replicas == 3, info.config
            assert (info.state.messages, info.state.last_seq) == (49, 50), info.state
            assert js.get_msg("KEEP", 50).data == b"m49"
            assert js.publish("keep.a", b"after").seq == 51
            print("RESTORED")
""")


def test_full_restart_brings_streams_and_messages_back(tmp_path):
    # a separate Ray instance per phase: shutting Ray down loses every actor
    script = tmp_path / "phase.py"
    script.write_text(RESTART_SCRIPT)
    data_dir = tmp_path / "data"
    env = {"RAY_ADDRESS": "", "PYTHONPATH": ":".join(sys.path)}
    import os

    env = {**os.environ, **env}
    env.pop("RAY_ADDRESS")
    for phase in ("write", "read"):
        proc = subprocess.run([sys.executable, str(script), str(data_dir), phase],
                              capture_output=True, text=True, timeout=240, env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "RESTORED" in proc.stdout


def _publish_table_until_stored(js, name, ids, timeout=120):
    """publish_batch a table of rows with msg ids, again for the rows refused (leader gone,
    paused, electing) until every row has an answer; msg id -> seq."""
    import time

    import pyarrow as pa

    from rayjet.errors import APIError

    seqs: dict[str, int] = {}
    todo = list(ids)
    deadline = time.monotonic() + timeout
    while todo:
        assert time.monotonic() < deadline, f"rows still refused: {len(todo)}"
        table = pa.table({"subject": [f"{name}.a"] * len(todo),
                          "data": [i.encode() for i in todo], "msg_id": todo})
        try:
            acks = js.publish_batch(table, timeout=20)
        except (APIError, TimeoutError):
            continue
        errors = acks.errors
        for row, msg_id in enumerate(todo):
            if row not in errors:
                seqs[msg_id] = int(acks.seqs[row])
        todo = [todo[row] for row in sorted(errors)]
    return seqs


def test_tables_lose_and_double_nothing_across_leader_kills_and_pauses(js, stream_name):
    import threading

    name = stream_name
    js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=3, storage=StorageType.FILE,
                  duplicate_window=300)
    try:
        acked: dict[str, int] = {}
        for i in range(8):
            if i in (2, 6):
                kill(replica_handles(js, name)[leader_id(js, name)])
            if i == 4:  # paused, not dead: the others elect a leader, then it comes back
                paused = pid(replica_handles(js, name)[leader_id(js, name)])
                os.kill(paused, signal.SIGSTOP)
                threading.Timer(3.0, os.kill, (paused, signal.SIGCONT)).start()
            ids = [f"t{i}-{j}" for j in range(300)]
            got = _publish_table_until_stored(js, name, ids)
            assert len(got) == len(ids)
            for msg_id, seq in got.items():
                assert acked.setdefault(msg_id, seq) == seq
        last = js.stream_info(name).state.last_seq
        stored = wait_replicas_equal(js, name, last, timeout=120)
        by_id = {data.decode(): seq for seq, data in stored}
        assert len(by_id) == len(stored) == len(acked) == 8 * 300  # each row exactly once
        assert by_id == acked  # at the sequence its answer gave
    finally:
        js.delete_stream(name)
