"""A FileStore never serves or silently forgets damaged data: after bit flips, cut or
missing block files, damaged index files, checkpoint or meta.json (each after a clean close
and after a crash), every message it stored is read back exactly or reported lost (reads
raise ``StoreCorruptionError``, ``state().lost`` / ``first_damaged_seq()`` name it), and
``truncate(first_damaged_seq() - 1)`` plus ``import_records`` from a healthy copy restores
every message, also across a reopen."""

from __future__ import annotations

import os
import pathlib
import random
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayjet.clock import ManualClock
from rayjet.errors import EncryptionKeyError, NotFoundError, StoreCorruptionError
from rayjet.storage import FileStore, MemStore, StoreConfig
from rayjet.storage import checkpoint as ckp
from rayjet.storage.blockindex import read_table, write_table

N = 2000
BLOCK = 4096
HDR = b"NATS/1.0\r\nK: v\r\n\r\n"


def cfg(**kw) -> StoreConfig:
    kw.setdefault("block_size", BLOCK)
    return StoreConfig(**kw)


def crash(store: FileStore) -> None:
    """What a killed process leaves: the written blocks, no close()."""
    for blk in store._blocks.values():
        blk.close()
    store._closed = True


def body(i: int) -> tuple[str, bytes, bytes]:
    return f"d.{i % 5}", HDR if i % 11 == 0 else b"", b"m%05d-" % i + b"x" * (i % 29)


def build(d: pathlib.Path, clean: bool, clock, **kw) -> tuple[dict[int, tuple], MemStore]:
    """A store of N messages over many blocks, a few of them deleted; what it holds, and
    a healthy replica of it (the same writes in a MemStore)."""
    s = FileStore(str(d), cfg(**kw), clock=clock)
    healthy = MemStore(StoreConfig(storage="memory"), clock=clock)
    for store in (s, healthy):
        for start in range(0, N, 100):
            store.store_batch([body(i) for i in range(start, start + 100)])
        for seq in range(7, N, 97):
            store.remove_msg(seq)
    expected = {seq: body(seq - 1) for seq in range(1, N + 1) if (seq - 7) % 97 or seq < 7}
    assert s.state().msgs == len(expected) == healthy.state().msgs
    s.close() if clean else crash(s)
    return expected, healthy


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    clock = ManualClock()
    out = {}
    for clean in (True, False):
        d = tmp_path_factory.mktemp("pristine") / ("clean" if clean else "crash")
        out[clean] = (d, *build(d, clean, clock))
    return out


def blocks(d: pathlib.Path) -> list[pathlib.Path]:
    return sorted(d.glob("*.blk"))


def flip(path: pathlib.Path, rng: random.Random, n: int) -> None:
    raw = bytearray(path.read_bytes())
    for _ in range(n):
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(raw))


def halve(path: pathlib.Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[:len(raw) // 2])


def damage(d: pathlib.Path, how: str, seed: int = 7) -> None:
    rng = random.Random(seed)
    files = blocks(d)
    middle = files[len(files) // 2]
    if how == "flips-every-block":
        for p in files:
            flip(p, rng, 3)
    elif how == "flips-middle-block":
        flip(middle, rng, 8)
    elif how == "flips-first-block":
        flip(files[0], rng, 8)
    elif how == "cut-first-block":
        halve(files[0])
    elif how == "cut-middle-block":
        halve(middle)
    elif how == "cut-last-block":
        halve(files[-1])
    elif how == "block-deleted":
        middle.unlink()
    elif how == "index-damaged":
        flip(sorted(d.glob("*.idx"))[len(files) // 3], rng, 4)
    elif how == "checkpoint-damaged":
        flip(d / "checkpoint.dat", rng, 4)
    elif how == "meta-damaged":
        flip(d / "meta.json", rng, 2)
    elif how == "meta-deleted":
        (d / "meta.json").unlink()
    else:
        raise AssertionError(how)


def audit(store: FileStore, expected: dict[int, tuple]) -> set[int]:
    """Every stored message is served exactly or reported lost; returns the lost seqs."""
    lost = set(store.state().lost)
    assert store.first_damaged_seq() == (min(lost) if lost else 0)
    refused = set()
    for seq, want in expected.items():
        try:
            m = store.load_msg(seq)
        except StoreCorruptionError as exc:
            assert exc.fields["seq"] == seq
            refused.add(seq)
            continue
        except NotFoundError:
            raise AssertionError(f"message {seq} silently missing") from None
        assert (m.subject, m.hdr, m.data) == want, f"message {seq} served wrong"
    lost = set(store.state().lost)
    assert refused <= lost
    # a range read never passes over a lost seq as if it had been deleted
    seq, served = 1, set()
    while True:
        try:
            m, seq = store.load_next_msg(">", True, seq)
        except NotFoundError:
            break
        except StoreCorruptionError as exc:
            assert exc.fields["seq"] in lost
            seq = exc.fields["seq"] + 1
            continue
        served.add(seq)
        seq += 1
    assert set(expected) <= served | lost
    # only stored seqs are lost (a deleted one only where damage took its delete record)
    assert lost <= set(range(1, N + 1))
    return lost


def export_all(src, start: int = 1, chunk: int = 16 << 10) -> list[bytes]:
    out, last = [], src.fast_state().last_seq
    while start <= last:
        buf, start = src.export_range(start, chunk)
        out.append(buf)
    return out


def repair(store: FileStore, healthy) -> None:
    """What the replication layer does: cut below the first damage, copy the rest."""
    bad = store.first_damaged_seq()
    if bad:
        store.truncate(bad - 1)
        assert store.first_damaged_seq() == 0 and store.state().lost == []
    for buf in export_all(healthy, store.fast_state().last_seq + 1):
        store.import_records(buf)


def same(store, healthy, expected) -> None:
    """``store`` holds what ``healthy`` holds. A crash leaves deletes after the last
    checkpoint only in the blocks' tails: where damage took those records, the deleted
    messages are back (intact: their own bytes), as after any lost delete record."""
    a, b = store.state(), healthy.state()
    assert (a.first_seq, a.last_seq, a.lost) == (b.first_seq, b.last_seq, [])
    for seq, want in expected.items():
        m = store.load_msg(seq)
        assert (m.subject, m.hdr, m.data) == want
    back = set(range(a.first_seq, a.last_seq + 1)) - set(a.deleted) - set(expected)
    for seq in back:
        m = store.load_msg(seq)
        assert (m.subject, m.hdr, m.data) == body(seq - 1)
    assert a.msgs == b.msgs + len(back)


DAMAGE = ["flips-every-block", "flips-middle-block", "flips-first-block", "cut-first-block",
          "cut-middle-block", "cut-last-block", "block-deleted", "index-damaged",
          "checkpoint-damaged", "meta-damaged", "meta-deleted"]


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crash"])
@pytest.mark.parametrize("how", DAMAGE)
def test_damage_is_reported_and_repaired(tmp_path, pristine, how, clean):
    clock = ManualClock()
    src, expected, healthy = pristine[clean]
    d = tmp_path / "s"
    shutil.copytree(src, d)
    damage(d, how)
    store = FileStore(str(d), cfg(), clock=clock)
    lost = audit(store, expected)
    if how.startswith(("flips", "cut", "block")):
        assert lost, "the damage must be reported"
    else:
        assert not lost  # damaged metadata is rebuilt from intact blocks: nothing is lost
    # the damage is remembered by a reopen, after a crash and after a clean close
    crash(store)
    store = FileStore(str(d), cfg(), clock=clock)
    assert set(store.state().lost) == lost
    store.close()
    store = FileStore(str(d), cfg(), clock=clock)
    assert set(store.state().lost) == lost
    repair(store, healthy)
    same(store, healthy, expected)
    store.close()
    store = FileStore(str(d), cfg(), clock=clock)
    same(store, healthy, expected)
    n = store.fast_state().msgs
    store.store_msg("after", b"", b"repair")  # and it goes on as any store does
    assert store.load_last_msg("after").seq == healthy.fast_state().last_seq + 1
    crash(store)
    store = FileStore(str(d), cfg(), clock=clock)
    assert store.first_damaged_seq() == 0 and store.fast_state().msgs == n + 1
    store.close()


def test_exactly_the_damaged_records_are_lost(tmp_path, pristine):
    """With the checkpoint intact, the lost seqs are exactly the live ones whose records
    the flips hit."""
    src, expected, _ = pristine[True]
    d = tmp_path / "s"
    shutil.copytree(src, d)
    target = blocks(d)[5]
    probe = FileStore(str(d), cfg())
    idx, in_block = probe._idx, {}
    for seq in expected:
        loc, n = idx.aux[0][seq - idx.base], idx.aux[1][seq - idx.base]
        if loc >> 40 == int(target.stem):
            in_block[seq] = (loc & ((1 << 40) - 1), n)
    probe.close()
    rng = random.Random(3)
    raw = bytearray(target.read_bytes())
    hit = set()
    for seq in rng.sample(sorted(in_block), 3):
        off, n = in_block[seq]
        raw[off + rng.randrange(n)] ^= 0x10
        hit.add(seq)
    target.write_bytes(bytes(raw))
    store = FileStore(str(d), cfg())
    assert set(store.state().lost) == hit
    assert store.recovery["blocks_scanned"] == 1  # only the damaged block, record by record
    assert audit(store, expected) == hit
    store.close()


def test_damage_after_open_is_never_served_nor_exported(tmp_path, clock):
    d = tmp_path / "s"
    s = FileStore(str(d), cfg(), clock=clock)
    for i in range(300):
        s.store_msg(*body(i))
    healthy = MemStore(StoreConfig(storage="memory"), clock=clock)
    for buf in export_all(s):
        healthy.import_records(buf)
    seq = 120
    i = seq - s._idx.base
    blk = s._blocks[s._idx.aux[0][i] >> 40]
    off = (s._idx.aux[0][i] & ((1 << 40) - 1)) + 25
    raw = bytearray(os.pread(blk.fd, 1, off))
    os.pwrite(blk.fd, bytes([raw[0] ^ 1]), off)
    # a copy stops before the damaged record, and refuses to go past it
    buf, nxt = s.export_range(100, 1 << 20)
    assert nxt == seq and s.first_damaged_seq() == seq
    with pytest.raises(StoreCorruptionError):
        s.export_range(seq, 1 << 20)
    with pytest.raises(StoreCorruptionError):
        s.load_msg(seq)
    assert s.load_next_msg(">", True, seq - 1)[1] == seq - 1
    with pytest.raises(StoreCorruptionError):
        s.load_next_msg(">", True, seq)
    page, nxt = s.read_columns(100, 300)
    assert page.num_rows == seq - 100 and nxt == seq
    with pytest.raises(StoreCorruptionError):
        s.read_columns(seq, 300)
    with pytest.raises(StoreCorruptionError):
        s.load_prev_msg(seq)
    assert s.load_last_msg(">").seq == 300
    with pytest.raises(StoreCorruptionError):
        s.snapshot()
    assert s.state().lost == [seq] and s.state().msgs == 299
    s.truncate(s.first_damaged_seq() - 1)
    for buf in export_all(healthy, seq):
        s.import_records(buf)
    s.close()
    s = FileStore(str(d), cfg(), clock=clock)
    assert s.first_damaged_seq() == 0
    assert [s.load_msg(q).data for q in range(1, 301)] == [body(i)[2] for i in range(300)]
    s.close()


def test_a_read_of_a_damaged_record_reports_it_in_every_range_read(tmp_path, clock):
    """A batch read that meets a record failing its checksum raises; the seq is lost."""
    d = tmp_path / "s"
    s = FileStore(str(d), cfg(block_size=1 << 20), clock=clock)
    for i in range(50):
        s.store_msg(*body(i))
    i = 30 - s._idx.base
    blk = s._blocks[s._idx.aux[0][i] >> 40]
    off = s._idx.aux[0][i] & ((1 << 40) - 1)
    os.pwrite(blk.fd, b"\xff", off + 30)
    with pytest.raises(StoreCorruptionError) as err:
        s.read_columns(1, 50)
    assert err.value.fields["seq"] == 30 and s.first_damaged_seq() == 30
    page, nxt = s.read_columns(1, 50)
    assert page.num_rows == 29 and nxt == 30
    s.close()


def test_deleting_a_lost_message_ends_the_loss(tmp_path, pristine):
    src, expected, _ = pristine[True]
    d = tmp_path / "s"
    shutil.copytree(src, d)
    halve(blocks(d)[3])
    s = FileStore(str(d), cfg())
    lost = s.state().lost
    assert lost
    assert s.remove_msg(lost[0]) and lost[0] not in s.state().lost
    with pytest.raises(NotFoundError):
        s.load_msg(lost[0])
    s.compact(lost[-1] + 1)
    assert s.first_damaged_seq() == 0
    s.close()
    s = FileStore(str(d), cfg())
    assert s.first_damaged_seq() == 0 and s.state().first_seq == lost[-1] + 1
    s.close()


def test_truncate_above_damage_keeps_the_damage(tmp_path, pristine):
    """Damage below the truncation point stays reported; the good state up to it stays."""
    src, expected, _ = pristine[False]
    d = tmp_path / "s"
    shutil.copytree(src, d)
    flip(blocks(d)[2], random.Random(5), 6)
    s = FileStore(str(d), cfg())
    lost = s.state().lost
    assert lost
    cut = lost[-1] + 150
    s.truncate(cut)
    st = s.state()
    assert st.last_seq == cut and st.lost == lost
    keep = {q: v for q, v in expected.items() if q <= cut}
    audit(s, keep)
    crash(s)
    s = FileStore(str(d), cfg())
    assert s.state().lost == lost and s.state().last_seq == cut
    audit(s, keep)
    s.close()


def test_all_blocks_gone(tmp_path, pristine):
    src, expected, _ = pristine[True]
    d = tmp_path / "s"
    shutil.copytree(src, d)
    for p in blocks(d):
        p.unlink()
    s = FileStore(str(d), cfg())
    assert set(s.state().lost) == set(expected)
    assert s.fast_state().last_seq == N  # seqs are not taken again
    s.close()


def test_erase_in_a_sealed_block_then_crash_is_not_damage(tmp_path, clock):
    d = tmp_path / "s"
    s = FileStore(str(d), cfg(), clock=clock)
    for i in range(500):
        s.store_msg(*body(i))
    s.close()
    s = FileStore(str(d), cfg(), clock=clock)
    assert s.erase_msg(10) and s.erase_msg(11)
    crash(s)  # the sealed block's index file still has the checksum from before the erase
    s = FileStore(str(d), cfg(), clock=clock)
    assert s.first_damaged_seq() == 0 and s.damage == []
    assert s.recovery["blocks_scanned"] == 1
    with pytest.raises(NotFoundError):
        s.load_msg(10)
    assert s.load_msg(12).data == body(11)[2]
    s.close()  # indexes the block again: the next reopen trusts its checksum
    s = FileStore(str(d), cfg(), clock=clock)
    assert s.recovery["blocks_scanned"] == 0 and s.state().msgs == 498
    s.close()


def test_index_files_without_a_checksum_are_verified_then_rewritten(tmp_path, pristine):
    """Index files written before they carried a checksum still open a store; its blocks
    are checked record by record once, and indexed again with a checksum."""
    src, expected, _ = pristine[True]
    d = tmp_path / "s"
    shutil.copytree(src, d)
    s = FileStore(str(d), cfg())
    codec = s.codec
    s.close()
    ck = ckp.read(str(d / ckp.NAME))
    digests = {}
    for p in sorted(d.glob("*.idx")):
        table, tail, _ = read_table(str(p), codec)
        digests[int(p.stem)] = write_table(str(p), table, tail, codec, None).hex()
        assert read_table(str(p), codec)[0].crc is None
    ck.blocks = [[no, size, top, digests.get(no, dg)] for no, size, top, dg in ck.blocks]
    ckp.write(str(d / ckp.NAME), ck)
    flip(blocks(d)[4], random.Random(1), 5)
    s = FileStore(str(d), cfg())
    assert s.recovery["checkpoint"] and s.recovery["blocks_scanned"] == len(blocks(d))
    lost = audit(s, expected)
    assert lost
    s.close()
    s = FileStore(str(d), cfg())
    assert set(s.state().lost) == lost and s.recovery["blocks_scanned"] == 0
    assert all(read_table(str(p), codec)[0].crc is not None for p in d.glob("*.idx"))
    s.close()


@pytest.mark.parametrize("key", [b"k1", None])
def test_meta_rebuilt_from_the_blocks(tmp_path, clock, key):
    d = tmp_path / "s"
    s = FileStore(str(d), cfg(encryption_key=key), clock=clock)
    for i in range(100):
        s.store_msg(*body(i))
    s.close()
    for how in ("flip", "delete", "garbage"):
        meta = d / "meta.json"
        if how == "flip":
            raw = bytearray(meta.read_bytes())
            raw[len(raw) // 2] ^= 0x01
            meta.write_bytes(bytes(raw))
        elif how == "delete":
            meta.unlink()
        else:
            meta.write_bytes(b"\x00\x01{")
        if key:
            with pytest.raises(EncryptionKeyError):
                FileStore(str(d), cfg(), clock=clock)
            with pytest.raises(EncryptionKeyError):
                FileStore(str(d), cfg(encryption_key=b"wrong"), clock=clock)
        else:
            with pytest.raises(EncryptionKeyError):
                FileStore(str(d), cfg(encryption_key=b"k"), clock=clock)
        s = FileStore(str(d), cfg(encryption_key=key), clock=clock)
        assert s.first_damaged_seq() == 0 and s.load_msg(42).data == body(41)[2]
        s.close()


@pytest.mark.parametrize("flavour", [{"compression": "s2"}, {"encryption_key": b"k1"}],
                         ids=["s2", "encrypted"])
@pytest.mark.parametrize("how", ["flips-middle-block", "cut-last-block", "block-deleted"])
def test_damage_in_compressed_and_encrypted_stores(tmp_path, flavour, how):
    clock = ManualClock()
    d = tmp_path / "s"
    expected, healthy = build(d, False, clock, **flavour)
    damage(d, how)
    s = FileStore(str(d), cfg(**flavour), clock=clock)
    assert audit(s, expected)
    repair(s, healthy)
    same(s, healthy, expected)
    s.close()
    s = FileStore(str(d), cfg(**flavour), clock=clock)
    same(s, healthy, expected)
    s.close()


@pytest.mark.parametrize("byte", [0, 2, 4, 12, 30])  # length, seq, ts, payload
def test_damaged_last_record_after_a_crash_is_lost_not_torn(tmp_path, clock, byte):
    """The last record (written after the last checkpoint) damaged anywhere, its length
    field included, is a lost message, not a write that never completed."""
    d = tmp_path / "s"
    s = FileStore(str(d), cfg(), clock=clock)
    for i in range(100):
        s.store_msg(*body(i))
    i = 100 - s._idx.base
    off = s._idx.aux[0][i] & ((1 << 40) - 1)
    crash(s)
    path = blocks(d)[-1]
    raw = bytearray(path.read_bytes())
    raw[off + byte] ^= 0x02
    path.write_bytes(bytes(raw))
    s = FileStore(str(d), cfg(), clock=clock)
    assert s.state().lost == [100] and s.fast_state().last_seq == 100
    with pytest.raises(StoreCorruptionError):
        s.load_msg(100)
    assert s.store_msg("next", b"", b"x")[0] == 101  # the lost seq is not taken again
    s.close()


def test_memstore_answers_the_damage_api():
    m = MemStore(StoreConfig(storage="memory"))
    m.store_msg("a", b"", b"x")
    assert m.first_damaged_seq() == 0 and m.state().lost == []


def test_damage_before_the_first_message_with_no_index_or_checkpoint_is_reported(
        tmp_path_factory, flip_source):
    """The first record's length flipped, the first block's index file and the checkpoint
    unreadable: a full replay finds the first intact message at seq 2, and seq 1 must be
    reported lost (the store began at 1, as the later index files say), not silently
    missing (a case hypothesis found)."""
    healthy, expected, files = flip_source
    d = tmp_path_factory.mktemp("firstflip")
    raw = {n: bytearray(b) for n, b in files.items()}
    for name, at in (("00000001.blk", 0), ("00000001.idx", 0), ("checkpoint.dat", 7)):
        raw[name][at] ^= 1
    for n, b in raw.items():
        (d / n).write_bytes(bytes(b))
    s = FileStore(str(d), cfg())
    assert s.recovery["checkpoint"] == 0 and s.recovery["blocks_replayed"] > 0
    assert audit(s, expected) == {1}
    s.close()


@pytest.fixture(scope="module")
def flip_source(tmp_path_factory):
    d = tmp_path_factory.mktemp("flipsrc") / "s"
    expected, healthy = build(d, False, ManualClock())
    return healthy, expected, {p.name: p.read_bytes() for p in d.iterdir()}


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10 ** 9), st.integers(0, 7)),
                      min_size=1, max_size=12),
       whole=st.booleans())
def test_random_flips_are_never_silent(tmp_path_factory, flip_source, flips, whole):
    """Flips anywhere in the blocks (``whole``: in the index files and checkpoint too)."""
    healthy, expected, files = flip_source
    d = tmp_path_factory.mktemp("flips")
    names = sorted(n for n in files if whole or n.endswith(".blk"))
    raw = {n: bytearray(b) for n, b in files.items()}
    for pos, bit in flips:
        name = names[pos % len(names)]
        if raw[name]:
            raw[name][(pos // len(names)) % len(raw[name])] ^= 1 << bit
    for n, b in raw.items():
        (d / n).write_bytes(bytes(b))
    try:
        s = FileStore(str(d), cfg())
    except EncryptionKeyError:
        assert whole  # a flip in meta.json's key check of a plain store is not one
        return
    audit(s, expected)
    repair(s, healthy)
    same(s, healthy, expected)
    crash(s)
    s = FileStore(str(d), cfg())
    same_state = s.state()
    assert same_state.lost == [] and same_state.msgs == len(expected)
    s.close()
