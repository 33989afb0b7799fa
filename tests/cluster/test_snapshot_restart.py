"""Replicas restart after every kind of snapshot: one installed from the leader (which
carries state, so the follower copies the messages from the leader), one taken locally, and
an empty disk caught up from the leader the same way.

The scenario runs in a child process with a Ray of its own whose replica actors compact
their raft log every 32 entries (``RAYJET_RAFT_COMPACT_ENTRIES``), so a paused follower
falls behind the leader's compaction point within a hundred publishes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, shutil, signal, sys, time
    from pathlib import Path
    os.environ["RAYJET_RAFT_COMPACT_ENTRIES"] = "32"  # inherited by the replica actors
    import ray, rayjet
    from rayjet import StorageType
    from tests.cluster.test_faults import leader_id, replica_contents, replica_handles
    from tests.replicas import hosting_for_tests, kill
    from tests.replicas import pid as replica_pid

    ray.init(address="local", num_cpus=2, namespace="rayjet", log_to_driver=False,
             include_dashboard=False)
    data_dir = Path(sys.argv[1])

    def wait_for(handle, last_seq, timeout=90):
        deadline = time.monotonic() + timeout
        while True:
            try:
                st = ray.get(handle.status.remote(), timeout=10)
                if st["last_seq"] == last_seq:
                    return st
            except Exception:  # restarting: ask again
                pass
            assert time.monotonic() < deadline, f"replica not at {last_seq}"
            time.sleep(0.2)

    def pid_of(handle):
        return replica_pid(handle, timeout=10)

    def restart(handle):
        # kill the process; return once Ray's restarted one answers (ray.kill does not
        # wait for the old process to go)
        old = pid_of(handle)
        kill(handle)
        deadline = time.monotonic() + 90
        while True:
            try:
                if pid_of(handle) != old:
                    return
            except Exception:  # dying or being restarted
                pass
            assert time.monotonic() < deadline, "the replica was not restarted"
            time.sleep(0.2)

    with rayjet.connect(data_dir=str(data_dir), timeout=30, hosting=hosting_for_tests()) as js:
        js.add_stream(name="SNAP", subjects=["snap.*"], num_replicas=3,
                      storage=StorageType.FILE)
        for i in range(10):
            js.publish("snap.a", b"%d" % i)
        handles = replica_handles(js, "SNAP")
        lead = leader_id(js, "SNAP")
        rid = next(r for r in handles if r != lead)
        follower = handles[rid]
        before = wait_for(follower, 10)
        pid = pid_of(follower)
        os.kill(pid, signal.SIGSTOP)
        try:
            for i in range(10, 110):  # one raft entry each: far past 32
                js.publish("snap.a", b"%d" % i)
            first = ray.get(handles[lead].status.remote(), timeout=10)["first_index"]
            assert first > before["applied"] + 1, (first, before)  # only a snapshot helps
        finally:
            os.kill(pid, signal.SIGCONT)
        expected = replica_contents(handles[lead], 110)
        wait_for(follower, 110)
        assert replica_contents(follower, 110) == expected
        copied = ray.get(follower.status.remote(), timeout=10)["store_copy"]
        assert copied["copies"] == 1 and copied["records"] > 0, copied  # not in the snapshot
        print("INSTALLED")

        restart(follower)  # Ray restarts it over its own disk
        wait_for(follower, 110)
        assert replica_contents(follower, 110) == expected
        print("RESTARTED")

        for i in range(110, 150):  # its own compactions now
            js.publish("snap.b", b"%d" % i)
        wait_for(follower, 150)
        restart(follower)
        wait_for(follower, 150)
        expected = replica_contents(handles[lead], 150)
        assert replica_contents(follower, 150) == expected
        print("LOCAL")

        group = js._stream("SNAP")[0]["group"]
        shutil.rmtree(data_dir / "streams" / group / rid)  # its disk is lost
        restart(follower)
        js.publish("snap.c", b"after")
        wait_for(follower, 151)
        assert replica_contents(follower, 151) == replica_contents(handles[lead], 151)
        copied = ray.get(follower.status.remote(), timeout=10)["store_copy"]
        assert copied["copies"] == 1 and copied["records"] >= 150, copied
        print("EMPTY")
""")


def test_replicas_restart_after_installed_local_and_empty_disk_snapshots(tmp_path):
    script = tmp_path / "scenario.py"
    script.write_text(SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *sys.path])}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "data")], cwd=root,
                          capture_output=True, text=True, timeout=420, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    steps = ["INSTALLED", "RESTARTED", "LOCAL", "EMPTY"]
    # Ray may forward its own lines to the driver's stdout (a killed worker's notice)
    assert [line for line in proc.stdout.splitlines() if line in steps] == steps
