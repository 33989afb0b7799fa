"""Damage to one meta member's files while Ray is down, the way users run it: an R3 stream
and a KV bucket written by one Ray, the files of ONE meta member damaged, then a new Ray over
the same data dir. connect() works, the catalogue is whole (streams listed and readable, a
new stream can be created), and the damaged member rejoins empty and catches up from the
leader with no manual step: it ends holding the catalogue the others hold."""

from __future__ import annotations

import json
import random
import shutil
import textwrap

import pytest

from rayjet.actors.raft_host import meta_group_options
from rayjet.meta import Catalogue
from rayjet.replication import FileLogStorage, ReplicaGroup
from rayjet.replication.meta_machine import MetaMachine
from rayjet.replication.rejoin import DAMAGED_SUFFIX, is_damage
from rayjet.replication.wal import REJOINING
from tests.cluster.restart_phases import run_phases

SCRIPT = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import ray, rayjet
    from rayjet import StorageType
    from rayjet.actors.meta import ensure_meta
    from rayjet.actors.names import META_MEMBERS, NAMESPACE, meta_actor_name, meta_member_id

    data_dir, phase = sys.argv[1], sys.argv[2]
    MEMBERS = [meta_member_id(i) for i in range(META_MEMBERS)]
    SNAPSHOT_AT = 24

    def statuses():
        out = {}
        for m in MEMBERS:
            try:
                handle = ray.get_actor(meta_actor_name(m), namespace=NAMESPACE)
                out[m] = ray.get(handle.status.remote(), timeout=10)
            except Exception as err:  # a member that does not answer: reported as such
                out[m] = {"role": None, "error": repr(err)}
        return out

    def wait_for(what, check, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            st = statuses()
            if check(st):
                return st
            assert time.monotonic() < deadline, (what, st)
            time.sleep(0.1)

    def agreed(st):
        # every member answers, none rejoins, and all hold the same applied catalogue
        cats = [s.get("catalogue") for s in st.values()]
        return (all(c is not None for c in cats) and len({json.dumps(c) for c in cats}) == 1
                and not any(s.get("rejoining") or s.get("failure") for s in st.values()))

    started = time.monotonic()
    # streams in shared hosts: a few processes to start, not one per replica
    with rayjet.connect(data_dir=data_dir, num_cpus=2, timeout=60, hosting="shared",
                        ray_init_kwargs={"include_dashboard": False}) as js:
        connected = time.monotonic() - started
        if phase == "write":
            js.add_stream(name="ORDERS", subjects=["orders.*"], num_replicas=3,
                          storage=StorageType.FILE)
            for i in range(20):
                js.publish("orders.new", b"o%d" % i)
            kv = js.create_key_value(bucket="CFG", replicas=3)
            kv.put("a", b"1")
            kv.put("b", b"2")
            # small catalogue entries until every member's snapshot holds the streams and
            # lies past the first half of its log (cut there, the log misses entries the
            # snapshot covers: damage a member can tell from a crash mid-write)
            deadline = time.monotonic() + 30
            while not all(s["snapshot_index"] >= SNAPSHOT_AT for s in statuses().values()):
                assert time.monotonic() < deadline, statuses()
                js.set_account_limits()
            st = wait_for("the members agree", agreed)
            leader = next(m for m, s in st.items() if s["role"] == "Leader")
            print("WRITTEN " + json.dumps({"leader": leader, "statuses": st}))
        else:
            names = js.stream_names()
            assert {"ORDERS", "KV_CFG"} <= set(names), names
            info = js.stream_info("ORDERS")
            assert (info.state.messages, info.state.last_seq) == (20, 20), info.state
            assert js.get_msg("ORDERS", 20).data == b"o19"
            kv = js.key_value("CFG")
            assert (kv.get("a").value, kv.get("b").value) == (b"1", b"2")
            js.add_stream(name="AFTER", subjects=["after.*"], num_replicas=3,
                          storage=StorageType.FILE)
            assert js.publish("after.x", b"x").seq == 1
            assert {"ORDERS", "KV_CFG", "AFTER"} <= set(js.stream_names())
            out = {"connect_seconds": connected}
            if phase.startswith("blocked:"):  # the member's dir is a file: it cannot open
                victim = phase.split(":")[1]
                out["blocked"] = statuses()[victim]
                out["blocked_cluster"] = js.meta_cluster()
                root = Path(data_dir) / "meta" / victim
                root.unlink()
                root.with_name(victim + ".aside").rename(root)
            settled = time.monotonic()
            st = wait_for("the damaged member rejoined", lambda st: agreed(st)
                          and all(s["catalogue"]["streams"] == 3 for s in st.values()))
            out["rejoin_seconds"] = time.monotonic() - settled
            out.update(statuses=st, meta_cluster=js.meta_cluster())
            if phase.startswith("blocked:"):
                # a member killed for good: the next connect() creates it again
                other = next(m for m, s in st.items() if s["role"] != "Leader")
                ray.kill(ray.get_actor(meta_actor_name(other), namespace=NAMESPACE),
                         no_restart=True)
                wait_for("the member dead", lambda st: "error" in st[other])
                ensure_meta(data_dir)
                st = wait_for("the killed member back", agreed)
                out["recreated"] = other
            print("VERIFIED " + json.dumps(out))
""")


def _open(root, probe):
    """Open a copy of a meta member's files as the member opens them."""
    shutil.copytree(root, probe)
    storage = FileLogStorage(probe)
    try:
        ReplicaGroup("m", storage, MetaMachine(Catalogue()), voters=["m"],
                     options=meta_group_options())
    finally:
        storage.close()


def _flip_bits(path, count=8, seed=11):
    raw = bytearray(path.read_bytes())
    rng = random.Random(seed)
    for _ in range(count):
        pos = rng.randrange(len(raw) // 8, len(raw))
        raw[pos] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(raw))


def _truncate_half(path):
    raw = path.read_bytes()
    path.write_bytes(raw[:len(raw) // 2])


CASES = {  # case -> (whose files, damage)
    "follower_snapshot_flips": ("follower", lambda d: _flip_bits(d / "snapshot.bin")),
    "leader_wal_half": ("leader", lambda d: _truncate_half(d / "wal.log")),
}


@pytest.fixture(autouse=True)
def meta_snapshots(monkeypatch):
    """Meta snapshots after every 4 applied entries, so a damaged member has one."""
    monkeypatch.setenv("RAYJET_META_COMPACT_ENTRIES", "4")


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_damaged_meta_member_rejoins_and_the_cluster_stays_usable(tmp_path, case):
    whose, damage = CASES[case]
    out = run_phases(tmp_path, SCRIPT, ["write"], timeout=120)
    written = json.loads(out.split("WRITTEN ", 1)[1].splitlines()[0])
    leader = written["leader"]
    victim = leader if whose == "leader" else next(m for m in sorted(written["statuses"])
                                                   if m != leader)
    root = tmp_path / "data" / "meta" / victim
    assert written["statuses"][victim]["snapshot_index"] >= 24, "no catalogue snapshot"
    damage(root)
    with pytest.raises(Exception) as found:  # damage a member can notice, or no test
        _open(root, tmp_path / "probe")
    assert is_damage(found.value), found.value
    out = run_phases(tmp_path, SCRIPT, ["verify"], timeout=120)
    report = json.loads(out.split("VERIFIED ", 1)[1].splitlines()[0])
    st = report["statuses"][victim]
    assert st["damage"], f"{victim} did not say what it found: {st}"
    assert not st["rejoining"]  # caught up: it votes again
    assert not (root / REJOINING).exists()
    assert root.with_name(root.name + DAMAGED_SUFFIX).exists()  # kept for a look
    others = [m for m in report["statuses"] if m != victim]
    assert not any(report["statuses"][m]["damage"] for m in others)
    assert report["connect_seconds"] < 60, report["connect_seconds"]


def test_a_meta_member_that_cannot_open_its_files_leaves_connect_working(tmp_path):
    """Not damage (its directory is a file: an OSError): nothing moves aside, the member
    stays up saying why, connect() and the API work through the others, and the member
    joins once its files can be opened. A member killed for good is created again."""
    out = run_phases(tmp_path, SCRIPT, ["write"], timeout=120)
    written = json.loads(out.split("WRITTEN ", 1)[1].splitlines()[0])
    victim = next(m for m in sorted(written["statuses"]) if m != written["leader"])
    root = tmp_path / "data" / "meta" / victim
    root.rename(root.with_name(victim + ".aside"))
    root.write_text("in the way")
    out = run_phases(tmp_path, SCRIPT, [f"blocked:{victim}"], timeout=180)
    report = json.loads(out.split("VERIFIED ", 1)[1].splitlines()[0])
    blocked = report["blocked"]
    assert blocked["role"] is None and "NotADirectoryError" in blocked["failure"], blocked
    seen = {r["name"]: r for r in report["blocked_cluster"]["replicas"]}
    assert seen[victim]["failure"], seen  # the leader's cluster info says so
    st = report["statuses"][victim]
    assert st["failure"] is None and not st["damage"] and not st["rejoining"]
    assert not root.with_name(victim + DAMAGED_SUFFIX).exists()
    assert report["recreated"] in report["statuses"]
    assert report["connect_seconds"] < 60, report["connect_seconds"]
