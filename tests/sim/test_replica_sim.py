"""The whole-replica simulator (rayjet.sim.replica): three real stream replicas on real
files under crashes, power loss, disk damage, disk errors and a faulty network.

Seeds 0..299 in six chunks (so xdist spreads them), exact replay, the mutation check, the
fault file system's own behaviour."""

from __future__ import annotations

import errno
import os
import random

import pytest

from rayjet.sim.__main__ import main
from rayjet.sim.faultfs import FaultFS
from rayjet.sim.replica import run_replica_seed

CHUNK = 50
CHUNKS = 6  # seeds 0..299


def _failures(seeds, **kw) -> list[str]:
    out = []
    for seed in seeds:
        r = run_replica_seed(seed, **kw)
        if not r.ok:
            out.append(f"seed {seed} ({r.phase}, tick {r.tick}): {r.error}")
    return out


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_seeds_without_a_violation(chunk: int) -> None:
    seeds = range(chunk * CHUNK, (chunk + 1) * CHUNK)
    failures = _failures(seeds)
    assert not failures, "\n".join(failures) + \
        "\nreplay: python -m rayjet.sim --replica --seed N --trace"


def test_a_seed_replays_exactly() -> None:
    first: list[str] = []
    second: list[str] = []
    a = run_replica_seed(3, trace=first.append)
    b = run_replica_seed(3, trace=second.append)
    assert a.ok and b.ok
    assert a.stats.crashes and a.stats.power_losses and a.stats.damages  # faults happened
    assert len(first) > 200
    assert first == second


def test_acking_before_fsync_is_caught() -> None:
    """The mutation no-fsync-before-ack acknowledges entries the log has not fsynced: a
    power loss then takes acknowledged messages, and the checker says so."""
    for seed in range(40):
        r = run_replica_seed(seed, mutation="no-fsync-before-ack")
        if not r.ok:
            assert "acknowledged" in r.error, r.error
            assert run_replica_seed(seed).ok  # the same schedule is fine with the fsync
            return
    pytest.fail("acking before fsync survived 40 seeds")


# -- the fault file system ---------------------------------------------------------------------

def _write(path: str, data: bytes, sync: bool) -> None:
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_power_loss_keeps_what_was_fsynced(tmp_path) -> None:
    root = tmp_path / "n1"
    root.mkdir()
    with FaultFS(tmp_path, random.Random(0)) as fs:
        a = str(root / "a")
        _write(a, b"synced", sync=True)
        _fsync_dir(str(root))
        _write(a, b"-lost", sync=False)
        _write(str(root / "b"), b"never named", sync=True)  # its directory never fsynced
        ino = os.stat(a).st_ino
        lost = fs.lose_power(str(root))
        assert open(a, "rb").read() == b"synced"
        assert os.stat(a).st_ino == ino  # rewritten in place, as a disk keeps its inodes
        assert not os.path.exists(root / "b")
        assert lost == {"a": 5, "b": 11}


def test_torn_power_loss_keeps_a_prefix_of_the_growth(tmp_path) -> None:
    root = tmp_path / "n1"
    root.mkdir()
    seen = set()
    with FaultFS(tmp_path, random.Random(0)) as fs:
        path = str(root / "log")
        _write(path, b"base", sync=True)
        _fsync_dir(str(root))
        for i in range(30):
            before = open(path, "rb").read()
            _write(path, b"0123456789", sync=False)
            fs.lose_power(str(root), torn=random.Random(i))
            got = open(path, "rb").read()
            assert got.startswith(before) and b"0123456789".startswith(got[len(before):])
            seen.add(len(got) - len(before))
    assert len(seen) > 3


def test_abandoned_descriptors_write_nowhere(tmp_path) -> None:
    root = tmp_path / "n1"
    root.mkdir()
    with FaultFS(tmp_path, random.Random(0)) as fs:
        path = str(root / "f")
        f = open(path, "ab")  # noqa: SIM115 - a dead process's file
        f.write(b"handed to the OS")
        f.flush()
        f.write(b" still in the buffer")
        assert fs.abandon(str(root)) == 1
        f.close()  # its buffer goes to /dev/null
        assert open(path, "rb").read() == b"handed to the OS"


@pytest.mark.parametrize("kind, code", [("enospc", errno.ENOSPC), ("eio-write", errno.EIO),
                                        ("eio-fsync", errno.EIO)])
def test_disk_faults_fail_that_replica_only(tmp_path, kind: str, code: int) -> None:
    (tmp_path / "n1").mkdir()
    (tmp_path / "n2").mkdir()
    with FaultFS(tmp_path, random.Random(0)) as fs:
        fs.set_fault(str(tmp_path / "n1"), kind)
        with pytest.raises(OSError) as err:
            with open(tmp_path / "n1" / "f", "ab") as f:
                f.write(b"x")
                f.flush()
                os.fsync(f.fileno())
        assert err.value.errno == code
        _write(str(tmp_path / "n2" / "f"), b"fine", sync=True)
        fs.clear_fault(str(tmp_path / "n1"))
        _write(str(tmp_path / "n1" / "g"), b"fine again", sync=True)


# -- the command line --------------------------------------------------------------------------

def test_cli_runs_replica_seeds(capsys) -> None:
    assert main(["--replica", "--seeds", "2", "--publishes", "40-60"]) == 0
    out = capsys.readouterr().out
    assert "seeds/s" in out and "zero invariant violations" in out
    assert main(["--replica", "--seed", "2", "--mutation", "no-fsync-before-ack"]) == 1
    assert "seed 2: FAILED" in capsys.readouterr().out


def test_cli_replays_a_replica_seed_with_a_trace(capsys) -> None:
    assert main(["--replica", "--seed", "4", "--trace", "--publishes", "30-30"]) == 0
    out = capsys.readouterr().out
    assert "starts (incarnation 1)" in out and "HEAL" in out and "seed 4: ok" in out
