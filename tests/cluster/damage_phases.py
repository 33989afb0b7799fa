"""The damage tests' phases: damage to one replica's files while Ray is down, the way
users run it: R3 file streams written by one Ray, the files of ONE replica (the leader or a follower) damaged, then a new
Ray over the same data dir. Every acknowledged message reads back with its bytes, the stream
takes writes, and the replicas agree again with no manual step: the damaged replica rejoins
empty and catches up from the leader."""

from __future__ import annotations

import json
import random
import textwrap

from rayjet.replication.rejoin import DAMAGED_SUFFIX
from tests.cluster.restart_phases import run_phases

SCRIPT = textwrap.dedent("""
    import hashlib, json, sys, time
    import ray, rayjet
    from rayjet import StorageType
    from rayjet.api import AckPolicy
    from tests.replicas import consumer_replicas, stream_replicas

    data_dir, phase = sys.argv[1], sys.argv[2]
    CASES = json.loads(%r)
    COUNT = 300
    CONSUMER_ON = "WFF" if "WFF" in CASES else None

    def body(name, i):
        return (b"%%s-%%05d-" %% (name.encode(), i)) * 40  # ~1 KB, unique per message

    def replicas(js, name):
        js._stream(name, refresh=True)
        return stream_replicas(js, name)

    def statuses(js, name):
        return {rid: ray.get(h.status.remote(), timeout=30)
                for rid, h in replicas(js, name).items()}

    with rayjet.connect(data_dir=data_dir, num_cpus=2, timeout=60,
                        ray_init_kwargs={"include_dashboard": False}) as js:
        if phase == "write":
            out = {}
            for name in CASES:
                js.add_stream(name=name, subjects=[name + ".*"], num_replicas=3,
                              storage=StorageType.FILE)
                acked = {}
                for i in range(COUNT):
                    ack = js.publish(name + ".a", body(name, i))
                    acked[ack.seq] = hashlib.sha256(body(name, i)).hexdigest()
                st = statuses(js, name)
                a = js._meta_call("stream_assignment", name)
                out[name] = {"group": a["group"], "acked": acked,
                             "leader": next(r for r, s in st.items() if s["role"] == "Leader"),
                             "replicas": sorted(st)}
            # a durable R3 consumer of one stream, 100 messages acked: its raft log is
            # damaged on one replica too
            if CONSUMER_ON is None:
                print("WRITTEN " + json.dumps(out))
                sys.exit(0)
            js.add_consumer(CONSUMER_ON, durable_name="C", ack_policy=AckPolicy.EXPLICIT)
            sub = js.pull_subscribe(CONSUMER_ON + ".a", durable="C", stream=CONSUMER_ON)
            acked_n = 0
            while acked_n < 100:
                for m in sub.fetch(100 - acked_n, timeout=5):
                    m.ack_sync()
                    acked_n += 1
            ca = js._meta_call("consumer_assignment", CONSUMER_ON, "C")
            out["consumer"] = {"group": ca["group"], "replicas": sorted(r for r, _ in ca["peers"]),
                               "leader": js.consumer_info(CONSUMER_ON, "C").cluster.leader}
            print("WRITTEN " + json.dumps(out))
        else:
            report = {}
            for name in CASES:
                info = js.stream_info(name)
                got = {}
                for seq in range(1, info.state.last_seq + 1):
                    got[str(seq)] = hashlib.sha256(js.get_msg(name, seq).data).hexdigest()
                after = js.publish(name + ".a", b"after").seq
                deadline = time.monotonic() + 120
                while True:
                    st = statuses(js, name)
                    contents = {}
                    for rid, h in replicas(js, name).items():
                        r = ray.get(h.read_range.remote(1, after, max_msgs=100_000), timeout=60)
                        contents[rid] = [(s, hashlib.sha256(d).hexdigest())
                                         for s, d in zip(r["seq"], r["data"])]
                    same = len({json.dumps(c) for c in contents.values()}) == 1
                    if same and all(not s["rejoining"] and not s["copying"] and
                                    s["last_seq"] == after for s in st.values()):
                        break
                    assert time.monotonic() < deadline, (name, {r: (s["role"], s["rejoining"],
                        s["copying"], s["last_seq"]) for r, s in st.items()})
                    time.sleep(0.2)
                report[name] = {"read": got, "after": after, "messages": info.state.messages,
                                "damage": {r: h["damage"] for r, h in
                                           js.stream_replica_health(name).items()}}
            if CONSUMER_ON is None:
                print("VERIFIED " + json.dumps(report))
                sys.exit(0)
            info = js.consumer_info(CONSUMER_ON, "C")
            sub = js.pull_subscribe(CONSUMER_ON + ".a", durable="C", stream=CONSUMER_ON)
            [m] = sub.fetch(1, timeout=10)
            deadline = time.monotonic() + 120
            while True:
                st = {rid: ray.get(h.status.remote(), timeout=30)
                      for rid, h in consumer_replicas(js, CONSUMER_ON, "C").items()}
                if (len({s["applied"] for s in st.values()}) == 1
                        and not any(s["rejoining"] for s in st.values())):
                    break
                assert time.monotonic() < deadline, st
                time.sleep(0.2)
            report["consumer"] = {"ack_floor": info.ack_floor.stream_seq,
                                  "next": m.metadata.sequence.stream,
                                  "damage": {r: s["damage"] for r, s in st.items()}}
            print("VERIFIED " + json.dumps(report))
""")


def _flip_bits(path, count=8, seed=7):
    raw = bytearray(path.read_bytes())
    rng = random.Random(seed)
    for _ in range(count):
        pos = rng.randrange(len(raw) // 8, len(raw))
        raw[pos] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(raw))


def _blocks(d):
    blocks = sorted((d / "store").glob("*.blk"))
    assert len(blocks) >= 3, "too few blocks: the case tests nothing"
    return blocks


def _flip_every_block(d):
    for i, blk in enumerate(_blocks(d)):
        _flip_bits(blk, seed=i)


def _truncate_half(path):
    raw = path.read_bytes()
    path.write_bytes(raw[:len(raw) // 2])


DAMAGE = {
    "wal_flips": lambda d: _flip_bits(d / "raft" / "wal.log"),
    "snapshot_flips": lambda d: _flip_bits(d / "raft" / "snapshot.bin"),
    "wal_cut": lambda d: _truncate_half(d / "raft" / "wal.log"),
    "block_flips": _flip_every_block,
    "first_block_cut": lambda d: _truncate_half(_blocks(d)[0]),
    "last_block_cut": lambda d: _truncate_half(_blocks(d)[-1]),
}


def run_damage_cases(tmp_path, monkeypatch, cases: dict, consumer: bool = False) -> None:
    """Write R3 streams (one per case), damage ONE replica's files per case (``whose``:
    leader or follower, ``kind``: a key of DAMAGE), start Ray again on the same data dir
    and check: every acknowledged message reads back with its bytes, the stream takes
    writes, the replicas agree, and only the damaged replica reports damage. ``consumer``:
    also a durable R3 consumer on "WFF" whose follower's raft log is damaged."""
    # snapshots (and the state-only catch-up they bring) after every 50 entries
    monkeypatch.setenv("RAYJET_RAFT_COMPACT_ENTRIES", "50")
    monkeypatch.setenv("RAYJET_STORE_BLOCK_SIZE", str(16 << 10))  # ~8 blocks a stream
    script = SCRIPT % json.dumps(sorted(cases))
    out = run_phases(tmp_path, script, ["write"], timeout=300)
    written = json.loads(out.split("WRITTEN ", 1)[1].splitlines()[0])
    assert consumer == ("consumer" in written)
    damaged = {}
    for name, (whose, kind) in cases.items():
        w = written[name]
        victim = w["leader"] if whose == "leader" else next(
            r for r in w["replicas"] if r != w["leader"])
        root = tmp_path / "data" / "streams" / w["group"] / victim
        assert (root / "raft" / "snapshot.bin").exists(), "no snapshot: the case tests nothing"
        DAMAGE[kind](root)
        damaged[name] = (victim, root)
    if consumer:
        c = written["consumer"]
        c_victim = next(r for r in c["replicas"] if r != c["leader"])
        c_root = tmp_path / "data" / "consumers" / c["group"] / c_victim
        assert (c_root / "raft" / "wal.log").exists(), "no consumer log: the case tests nothing"
        _flip_bits(c_root / "raft" / "wal.log")
    out = run_phases(tmp_path, script, ["verify"], timeout=300)
    report = json.loads(out.split("VERIFIED ", 1)[1].splitlines()[0])
    for name, (victim, root) in damaged.items():
        r, acked = report[name], written[name]["acked"]
        assert r["messages"] == len(acked) == 300 and r["after"] == 301
        for seq, digest in acked.items():  # every acknowledged message, with its bytes
            assert r["read"][seq] == digest, (name, seq)
        # a cut in the block being written reads as a write torn by a crash: the raft
        # log, which holds those entries, puts them back without a word
        if cases[name][1] != "last_block_cut":
            assert r["damage"][victim], (name, "the damaged replica did not say so")
        assert not any(d for rid, d in r["damage"].items() if rid != victim)
        if cases[name][1] in ("wal_flips", "snapshot_flips", "wal_cut"):
            # moved aside, kept for a look
            assert root.with_name(root.name + DAMAGED_SUFFIX).exists()
    if consumer:  # its acks survived the damage to one of its replicas, which rejoined
        rc = report["consumer"]
        assert (rc["ack_floor"], rc["next"]) == (100, 101), rc
        assert rc["damage"][c_victim] and not any(
            d for rid, d in rc["damage"].items() if rid != c_victim)
