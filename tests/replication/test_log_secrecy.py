"""What the raft log keeps of a payload: sealed with the stream's key, and gone after the
compaction that follows an erase or a purge."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.replication.test_power_loss import NODES, Cluster


def files_holding(root: Path, needle: bytes) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and needle in p.read_bytes())


@pytest.mark.parametrize("names", NODES)
def test_an_encrypted_stream_writes_no_payload_in_plain(tmp_path, names):
    cluster = Cluster(tmp_path, names, "always", key=b"stream-key", snapshot_every=10)
    cluster.open()
    for i in range(30):
        cluster.publish([b"PLAIN-PAYLOAD-%03d" % i])
    cluster.settle()
    assert len(cluster.contents(names[-1])) == 30  # the replicas hold them (decrypted)
    assert files_holding(tmp_path, b"PLAIN-PAYLOAD-") == []
    assert any(tmp_path.rglob("snapshot.bin")) and any(tmp_path.rglob("wal.log"))


def test_an_unencrypted_stream_does_write_them(tmp_path):
    """The check above can fail: without a key the payloads are in the log and the store."""
    cluster = Cluster(tmp_path, ["a"], "always")
    cluster.open()
    cluster.publish([b"PLAIN-PAYLOAD-1"])
    assert files_holding(tmp_path, b"PLAIN-PAYLOAD-1") == ["a/raft/wal.log", "a/store/00000001.blk"]


def erase(seq):
    return lambda engine: [engine.prepare_delete(seq, erase=True)]


def purge(engine):
    return [engine.prepare_purge()]


@pytest.mark.parametrize("names", NODES)
@pytest.mark.parametrize("remove", ["erase", "purge"])
def test_the_log_copy_goes_at_the_next_compaction(tmp_path, names, remove):
    cluster = Cluster(tmp_path, names, "always", snapshot_every=20)
    cluster.open()
    for i in range(1, 6):
        cluster.publish([b"SECRET-%d" % i])
    cluster.propose(erase(3) if remove == "erase" else purge)
    cluster.settle()
    gone = b"SECRET-3"
    # the window: until the next compaction the log still holds the entry that carried it
    assert all(f.endswith("wal.log") for f in files_holding(tmp_path, gone))
    assert len(files_holding(tmp_path, gone)) == len(names)
    for i in range(25):
        cluster.publish([b"filler-%d" % i])
    cluster.settle()
    assert files_holding(tmp_path, gone) == []
    kept = files_holding(tmp_path, b"SECRET-2")  # untouched messages stay in the store
    assert kept == ([] if remove == "purge" else
                    sorted(f"{n}/store/00000001.blk" for n in names))
