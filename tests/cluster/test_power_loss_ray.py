"""Power loss on the leader's machine at the Ray level, as Jepsen tried NATS: an R3 file
stream, four publishers with msg ids, one follower paused; then every replica process
killed mid-publish and, on the leader, ``wal.log`` cut back to a point between its last
fsync (what ``wal.synced`` says) and its end: what a power loss leaves. After Ray starts
again on the same data dir every acknowledged message is there, at its sequence, once."""

from __future__ import annotations

import json
import random
import textwrap

import pytest

from tests.cluster.restart_phases import run_phases

SCRIPT = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    import ray, rayjet
    from rayjet import StorageType
    from tests.replicas import pid, stream_replicas

    data_dir, phase = sys.argv[1], sys.argv[2]
    NAME = "PL"

    def replicas(js):
        js._stream(NAME, refresh=True)
        return stream_replicas(js, NAME)

    with rayjet.connect(data_dir=data_dir, num_cpus=2, timeout=60, hosting="dedicated",
                        ray_init_kwargs={"include_dashboard": False}) as js:
        if phase == "write":
            js.add_stream(name=NAME, subjects=["pl.*"], num_replicas=3,
                          storage=StorageType.FILE, duplicate_window=600)
            handles = replicas(js)
            leader = next(r for r, h in handles.items()
                          if ray.get(h.status.remote(), timeout=30)["role"] == "Leader")
            paused = next(r for r in sorted(handles) if r != leader)
            acks, lock, stop = {}, threading.Lock(), threading.Event()

            def publisher(k):
                i = 0
                while not stop.is_set():
                    msg_id = f"p{k}-{i}"
                    try:
                        ack = js.publish("pl.a", msg_id.encode(),
                                         headers={"Nats-Msg-Id": msg_id}, timeout=5)
                    except Exception:
                        if stop.is_set():
                            return
                        continue
                    with lock:
                        acks[msg_id] = ack.seq
                    i += 1

            threads = [threading.Thread(target=publisher, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            while len(acks) < 200:
                time.sleep(0.05)
            os.kill(pid(handles[paused]), signal.SIGSTOP)  # the other follower stops here
            with lock:
                before = len(acks)
            while len(acks) < before + 300:
                time.sleep(0.05)
            # every replica process dies at once, mid-publish
            for rid in sorted(handles, key=lambda r: r != leader):
                ray.kill(handles[rid], no_restart=True)
            with lock:
                got = dict(acks)  # acknowledged before the power went
            stop.set()
            for t in threads:
                t.join(30)
            a = js._meta_call("stream_assignment", NAME)
            print("WRITTEN " + json.dumps({"group": a["group"], "leader": leader,
                                           "paused": paused, "acks": got}))
        else:
            st = js.stream_info(NAME).state
            seen = {}
            for seq in range(st.first_seq, st.last_seq + 1):
                data = js.get_msg(NAME, seq).data.decode()
                seen.setdefault(data, seq)
            print("VERIFIED " + json.dumps({"seen": seen, "messages": st.messages}))
""")


def _synced(raft_dir) -> int:
    import struct

    raw = (raft_dir / "wal.synced").read_bytes()
    return struct.unpack_from("<8sQQ", raw)[2]


@pytest.mark.timeout(900)
def test_the_leaders_power_loss_keeps_every_acknowledged_message(tmp_path):
    out = run_phases(tmp_path, SCRIPT, ["write"], timeout=400)
    w = json.loads(out.split("WRITTEN ", 1)[1].splitlines()[0])
    assert len(w["acks"]) >= 500
    raft = tmp_path / "data" / "streams" / w["group"] / w["leader"] / "raft"
    wal = raft / "wal.log"
    synced, end = _synced(raft), wal.stat().st_size
    assert 0 < synced <= end
    cut = random.Random(7).randint(synced, end)
    with open(wal, "r+b") as f:  # what was not fsynced is gone, part of it torn
        f.truncate(cut)
    out = run_phases(tmp_path, SCRIPT, ["verify"], timeout=400)
    v = json.loads(out.split("VERIFIED ", 1)[1].splitlines()[0])
    missing = {i: s for i, s in w["acks"].items() if v["seen"].get(i) != s}
    assert not missing, f"{len(missing)} acknowledged messages lost or moved: {missing}"
    assert v["messages"] == len(v["seen"])  # each id stored once
