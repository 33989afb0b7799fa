"""FileStore-only behaviour: blocks, index file, sync, compression, encryption, corruption."""

from __future__ import annotations

import os
import pathlib
import random

import pytest

from rayjet.clock import ManualClock
from rayjet.errors import EncryptionKeyError, InvalidConfigError, StoreCorruptionError
from rayjet.storage import FileStore, StoreConfig

from .test_contract import all_msgs


def blocks(path) -> list[pathlib.Path]:
    return sorted(pathlib.Path(path).glob("*.blk"))


def open_store(path, clock, **kw) -> FileStore:
    kw.setdefault("block_size", 4096)
    return FileStore(str(path), StoreConfig(**kw), clock=clock)


def test_block_file_holds_the_seed_record_layout(tmp_path, clock):
    s = open_store(tmp_path, clock)
    s.store_msg("abcd", b"", b"hello")
    s.close()
    raw = blocks(tmp_path)[0].read_bytes()
    assert len(raw) == 39
    assert int.from_bytes(raw[0:4], "little") == 39
    assert int.from_bytes(raw[4:12], "little") == 1
    assert int.from_bytes(raw[12:20], "little") == clock.now_ns()
    assert int.from_bytes(raw[20:22], "little") == 4
    assert raw[22:26] == b"abcd" and raw[26:31] == b"hello"


def test_block_rollover_and_reopen(tmp_path, clock):
    s = open_store(tmp_path, clock, block_size=1024)
    for i in range(200):
        s.store_msg(f"s.{i % 7}", b"", b"p" * 40 + b"%d" % i)
    assert len(blocks(tmp_path)) > 5
    assert all(p.stat().st_size <= 1024 for p in blocks(tmp_path))
    before, msgs = s.state(), all_msgs(s)
    s.close()
    assert (tmp_path / "checkpoint.dat").exists()
    assert len(list(tmp_path.glob("*.idx"))) == len(blocks(tmp_path))
    s = open_store(tmp_path, clock, block_size=1024)
    assert s.recovery["checkpoint"] and s.recovery["frames_replayed"] == 0  # nothing decoded
    assert s.state() == before and all_msgs(s) == msgs
    assert s.load_last_msg("s.3").data == b"p" * 40 + b"199"
    s.close()


def test_compact_drops_whole_blocks(tmp_path, clock):
    s = open_store(tmp_path, clock, block_size=1024)
    for _i in range(100):
        s.store_msg("a", b"", b"p" * 50)
    n = len(blocks(tmp_path))
    s.compact(90)
    assert len(blocks(tmp_path)) < n
    s.purge()
    assert len(blocks(tmp_path)) == 1
    s.close()
    s = open_store(tmp_path, clock, block_size=1024)
    assert (s.state().first_seq, s.state().last_seq, s.state().msgs) == (101, 100, 0)
    s.close()


@pytest.mark.parametrize("damage", ["missing", "stale", "garbled"])
def test_index_rebuilt_when_missing_or_stale(tmp_path, clock, damage):
    s = open_store(tmp_path, clock)
    for i in range(50):
        s.store_msg(f"k.{i % 5}", b"", b"v%d" % i)
    s.remove_msg(10)
    s.close()
    idx = tmp_path / "checkpoint.dat"
    if damage == "missing":
        idx.unlink()
    elif damage == "stale":
        saved = idx.read_bytes()
        s = open_store(tmp_path, clock)
        s.store_msg("k.new", b"", b"after")
        s.close()
        idx.write_bytes(saved)  # an index from before the last write
    else:
        raw = bytearray(idx.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        idx.write_bytes(bytes(raw))
    s = open_store(tmp_path, clock)
    st = s.state()
    assert st.deleted == [10]
    assert st.last_seq == (51 if damage == "stale" else 50)
    assert s.load_last_msg("k.4").data == b"v49"
    s.close()


def test_sync_always_is_one_fsync_per_batch(tmp_path, clock):
    s = open_store(tmp_path, clock, sync_interval="always", block_size=1 << 20)
    base = s.sync_count
    s.store_msg("a", b"", b"x")
    assert s.sync_count == base + 1
    s.store_batch([("a", b"", b"y" * 128)] * 1000)
    assert s.sync_count == base + 2


def test_sync_interval_uses_the_clock(tmp_path):
    clock = ManualClock()
    s = open_store(tmp_path, clock, sync_interval=120)
    base = s.sync_count
    for _ in range(10):
        s.store_msg("a", b"", b"x")
        clock.advance(10)
    assert s.sync_count == base
    clock.advance(30)
    s.store_msg("a", b"", b"x")
    assert s.sync_count == base + 1
    s.store_msg("a", b"", b"x")
    assert s.sync_count == base + 1
    s.sync()
    assert s.sync_count == base + 2


def test_compression_shrinks_blocks(tmp_path, clock):
    plain = open_store(tmp_path / "p", clock)
    packed = open_store(tmp_path / "c", clock, compression="s2")
    for s in (plain, packed):
        for _i in range(50):
            s.store_msg("a", b"", b"abcdefgh" * 64)
        assert s.state().bytes == 50 * (30 + 1 + 512)  # accounting ignores compression
        s.close()
    size = lambda d: sum(p.stat().st_size for p in blocks(d))  # noqa: E731
    assert size(tmp_path / "c") * 4 < size(tmp_path / "p")
    s = open_store(tmp_path / "c", clock)  # compression is per record: readable either way
    assert s.load_msg(7).data == b"abcdefgh" * 64
    s.close()


def test_encryption_at_rest(tmp_path, clock):
    s = open_store(tmp_path, clock, encryption_key=b"k1")
    s.store_msg("secret.subject", b"", b"TOP-SECRET-PAYLOAD")
    s.close()
    raw = b"".join(p.read_bytes() for p in blocks(tmp_path))
    assert b"TOP-SECRET-PAYLOAD" not in raw and b"secret.subject" not in raw
    with pytest.raises(EncryptionKeyError):
        open_store(tmp_path, clock, encryption_key=b"wrong")
    with pytest.raises(EncryptionKeyError):
        open_store(tmp_path, clock)
    (tmp_path / "checkpoint.dat").unlink(missing_ok=True)
    s = open_store(tmp_path, clock, encryption_key=b"k1")
    assert s.load_msg(1).data == b"TOP-SECRET-PAYLOAD"
    with pytest.raises(InvalidConfigError):
        s.update_config(StoreConfig(encryption_key=b"other"))
    s.close()


def test_key_from_environment(tmp_path, clock, monkeypatch):
    monkeypatch.setenv("RAYJET_STORE_KEY", "from-env")
    s = open_store(tmp_path, clock)
    s.store_msg("a", b"", b"PLAINTEXT")
    s.close()
    assert b"PLAINTEXT" not in blocks(tmp_path)[0].read_bytes()
    monkeypatch.delenv("RAYJET_STORE_KEY")
    with pytest.raises(EncryptionKeyError):
        open_store(tmp_path, clock)


def test_plain_store_refuses_a_key(tmp_path, clock):
    s = open_store(tmp_path, clock)
    s.store_msg("a", b"", b"x")
    s.close()
    with pytest.raises(EncryptionKeyError):
        open_store(tmp_path, clock, encryption_key=b"k")


def test_bit_flip_after_open_is_never_served(tmp_path, clock):
    s = open_store(tmp_path, clock)
    for i in range(10):
        s.store_msg("a", b"", b"payload-%d" % i)
    blk = blocks(tmp_path)[0]
    with open(blk, "r+b") as f:
        f.seek(39 * 3 + 30)  # inside the payload of seq 4
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x04]))
    with pytest.raises(StoreCorruptionError):
        s.load_msg(4)
    assert 4 in s.state().lost
    assert s.load_msg(5).data == b"payload-4"
    s.close()


@pytest.mark.parametrize("flavour", [{}, {"compression": "s2"}, {"encryption_key": b"k"}])
def test_truncation_at_any_byte_recovers_complete_records(tmp_path, clock, flavour):
    rng = random.Random(1234)
    src = tmp_path / "src"
    s = open_store(src, clock, block_size=1 << 20, **flavour)
    ends = []
    for i in range(60):
        s.store_msg(f"t.{i % 3}", b"" if i % 4 else b"NATS/1.0\r\nA: b\r\n\r\n", b"m%d" % i * (i % 9))
        s.flush()
        ends.append(blocks(src)[0].stat().st_size)
        if i % 10 == 9:
            s.remove_msg(i - 3)
            s.flush()
            ends.append(-blocks(src)[0].stat().st_size)
    expected_all = {m.seq: m for m in all_msgs(s)}
    for blk in s._blocks.values():
        blk.close()
    s._closed = True
    data = blocks(src)[0].read_bytes()
    meta = (src / "meta.json").read_bytes()
    for trial in range(40):
        cut = rng.randrange(0, len(data) + 1)
        d = tmp_path / f"cut{trial}"
        d.mkdir()
        (d / "meta.json").write_bytes(meta)
        (d / blocks(src)[0].name).write_bytes(data[:cut])
        r = open_store(d, clock, block_size=1 << 20, **flavour)
        complete = sum(1 for e in ends if 0 < e <= cut)
        st = r.state()
        assert st.last_seq == complete
        for m in all_msgs(r):
            assert m == expected_all.get(m.seq, m)  # whatever is served is intact
        # a record removed after the cut comes back (its tombstone was lost), never garbage
        r.store_msg("after", b"", b"crash")
        r.close()
        r = open_store(d, clock, block_size=1 << 20, **flavour)
        assert r.load_last_msg("after").data == b"crash"
        assert r.state().last_seq == complete + 1
        r.close()


@pytest.mark.parametrize("flavour", [{}, {"compression": "s2"}, {"encryption_key": b"k"}])
def test_bit_flips_are_detected_and_reported(tmp_path, clock, flavour):
    rng = random.Random(99)
    src = tmp_path / "src"
    s = open_store(src, clock, block_size=2048, **flavour)
    for i in range(80):
        s.store_msg(f"f.{i % 4}", b"", b"data-%d-" % i + b"z" * (i % 13))
    expected = {m.seq: m for m in all_msgs(s)}
    last = s.state().last_seq
    for blk in s._blocks.values():
        blk.close()
    s._closed = True
    files = {p.name: p.read_bytes() for p in blocks(src)}
    meta = (src / "meta.json").read_bytes()
    for trial in range(40):
        d = tmp_path / f"flip{trial}"
        d.mkdir()
        (d / "meta.json").write_bytes(meta)
        victim = rng.choice(sorted(files))
        for name, raw in files.items():
            if name == victim:
                raw = bytearray(raw)
                raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
            (d / name).write_bytes(bytes(raw))
        r = open_store(d, clock, block_size=2048, **flavour)
        assert r.damage, "a flipped bit must be detected"
        served, refused = [], set()
        for seq in expected:
            try:
                served.append(r.load_msg(seq))
            except StoreCorruptionError:
                refused.add(seq)  # a lost message is reported, not answered as deleted
        for m in served:
            assert m == expected[m.seq]
        missing = set(expected) - {m.seq for m in served}
        assert missing, "the damaged record must not be served"
        st = r.state()
        assert (missing == refused and missing <= set(st.lost)) or \
            (missing == {last} and st.last_seq == last - 1)
        r.close()


def test_config_validation():
    for bad in [dict(block_size=-1), dict(block_size=10), dict(max_msgs=-5),
                dict(max_age=-1), dict(sync_interval="sometimes"), dict(discard="maybe"),
                dict(compression="lz5"), dict(discard_new_per_subject=True),
                dict(cipher="rot13"), dict(max_bytes=1.5)]:
        with pytest.raises(InvalidConfigError):
            StoreConfig(**bad)
    assert StoreConfig().sync_interval == 120
    assert StoreConfig(sync_interval="always").sync_always
