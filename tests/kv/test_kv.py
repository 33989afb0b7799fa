"""The key-value store on real stream actors: every operation, names, CAS, TTLs, R3."""

from __future__ import annotations

import threading
import time

import pytest

from rayjet import KeyValueConfig, StorageType
from rayjet.api import DiscardPolicy, KeyValueOp, Placement, RePublish, StreamSource
from rayjet.errors import (
    BadBucketNameError,
    BucketNotFoundError,
    InvalidKeyError,
    KeyDeletedError,
    KeyHistoryTooLargeError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    MessageTooBigError,
    StreamNameInUseError,
)
from rayjet.kv import Entry, KeyValue, bucket_stream_config

MEM = StorageType.MEMORY


@pytest.fixture
def bucket(stream_name):
    return stream_name


@pytest.fixture
def kv(js, bucket):
    """A bucket of the test's own (for tests that count what the bucket holds)."""
    kv = js.create_key_value(KeyValueConfig(bucket=bucket, history=10, storage=MEM))
    yield kv
    js.delete_key_value(bucket)


@pytest.fixture(scope="module")
def shared(js):
    """One bucket for the tests that only look at their own keys (a bucket costs seconds)."""
    kv = js.create_key_value(KeyValueConfig(bucket="kvshared", history=10, storage=MEM))
    yield kv
    js.delete_key_value("kvshared")


# -- the stream behind a bucket -------------------------------------------------------------
def test_bucket_stream_config_is_built_as_nats_does():
    cfg = bucket_stream_config(KeyValueConfig(
        bucket="prof", history=5, ttl=60.0, max_value_size=1024, max_bytes=1 << 20,
        replicas=3, storage=MEM, placement=Placement(tags=("ssd",)),
        republish=RePublish(src=">", dest="repub.>"), description="d", compression=True))
    assert cfg.name == "KV_prof" and cfg.subjects == ("$KV.prof.>",)
    assert (cfg.max_msgs_per_subject, cfg.max_age, cfg.max_msg_size, cfg.max_bytes) == (
        5, 60.0, 1024, 1 << 20)
    assert (cfg.num_replicas, cfg.storage, cfg.placement.tags) == (3, MEM, ("ssd",))
    assert cfg.republish.dest == "repub.>" and cfg.description == "d"
    assert cfg.discard is DiscardPolicy.NEW and cfg.duplicate_window == 60.0
    assert cfg.allow_rollup_hdrs and cfg.deny_delete and not cfg.deny_purge
    assert cfg.allow_direct and cfg.allow_msg_ttl and cfg.compression == "s2"
    assert (cfg.max_msgs, cfg.max_consumers) == (-1, -1)
    # defaults: history 1, no ttl (2 min dedup window), direct gets on
    plain = bucket_stream_config(KeyValueConfig(bucket="p"))
    assert (plain.max_msgs_per_subject, plain.max_age, plain.duplicate_window) == (1, 0.0, 120.0)
    assert bucket_stream_config(KeyValueConfig(bucket="p", direct=False)).allow_direct is False
    marker = bucket_stream_config(KeyValueConfig(bucket="p", limit_marker_ttl=5.0))
    assert marker.subject_delete_marker_ttl == 5.0


def test_mirror_and_source_buckets_follow_nats():
    mirror = bucket_stream_config(KeyValueConfig(bucket="m", mirror=StreamSource(name="orig")))
    assert mirror.subjects == () and mirror.mirror.name == "KV_orig" and mirror.mirror_direct
    src = bucket_stream_config(KeyValueConfig(bucket="agg", sources=(
        StreamSource(name="a"), StreamSource(name="KV_b"))))
    assert src.subjects == ("$KV.agg.>",)
    assert [s.name for s in src.sources] == ["KV_a", "KV_b"]
    assert [(t.src, t.dest) for s in src.sources for t in s.subject_transforms] == [
        ("$KV.a.>", "$KV.agg.>"), ("$KV.b.>", "$KV.agg.>")]


def test_create_key_value_makes_the_stream(js, shared):
    bucket = shared.bucket
    info = js.stream_info(f"KV_{bucket}")
    assert info.config.subjects == (f"$KV.{bucket}.>",)
    assert info.config.max_msgs_per_subject == 10 and info.config.deny_delete
    # the same config again gives the bucket; another config is refused
    assert js.create_key_value(KeyValueConfig(bucket=bucket, history=10, storage=MEM)).bucket \
        == bucket
    with pytest.raises(StreamNameInUseError):
        js.create_key_value(KeyValueConfig(bucket=bucket, history=3, storage=MEM))
    again = js.key_value(bucket)
    assert isinstance(again, KeyValue) and again.stream == f"KV_{bucket}"


# -- operations -----------------------------------------------------------------------------
def test_put_get_revisions_and_history(shared):
    kv, bucket = shared, shared.bucket
    r1 = kv.put("sue.color", b"blue")
    r2 = kv.put("sue.color", "green")
    kv.put("other", b"x")
    e = kv.get("sue.color")
    assert isinstance(e, Entry)
    assert (e.bucket, e.key, e.value, e.revision, e.operation) == (
        bucket, "sue.color", b"green", r2, KeyValueOp.PUT)
    assert e.created is not None and e.delta == 0
    assert kv.get("sue.color", revision=r1).value == b"blue"
    with pytest.raises(KeyNotFoundError):
        kv.get("sue.color", revision=r2 + 1)  # the revision of another key
    with pytest.raises(KeyNotFoundError) as exc:
        kv.get("nobody")
    assert not isinstance(exc.value, KeyDeletedError) and exc.value.err_code == 10037
    hist = kv.history("sue.color")
    assert [(h.value, h.revision, h.delta) for h in hist] == [(b"blue", r1, 1), (b"green", r2, 0)]
    with pytest.raises(KeyNotFoundError):
        kv.history("nobody")


def test_create_update_and_cas_conflicts(shared):
    kv = shared
    r1 = kv.create("k", b"1")
    with pytest.raises(KeyWrongLastSequenceError) as exc:
        kv.create("k", b"again")
    assert exc.value.err_code == 10071 and exc.value.code == 400
    r2 = kv.update("k", b"2", last=r1)
    with pytest.raises(KeyWrongLastSequenceError) as exc:
        kv.update("k", b"stale", last=r1)
    assert exc.value.err_code == 10071
    with pytest.raises(KeyWrongLastSequenceError):
        kv.update("fresh", b"x", last=r2)  # the key has no revision yet
    assert kv.update("fresh", b"x", last=0) > r2
    with pytest.raises(KeyWrongLastSequenceError):
        kv.delete("k", last=r1)
    assert kv.delete("k", last=r2) is True
    # create succeeds over a delete marker and over a purge marker
    r3 = kv.create("k", b"3")
    assert kv.get("k").value == b"3" and kv.get("k").revision == r3
    kv.purge("k")
    assert kv.create("k", b"4") > r3
    assert kv.get("k").value == b"4"


def test_delete_purge_keys_and_status(kv, bucket):
    for key in ("a.1", "a.2", "b.1", "c"):
        kv.put(key, b"v")
    kv.put("a.1", b"v2")
    assert kv.delete("a.2") is True
    with pytest.raises(KeyDeletedError) as exc:
        kv.get("a.2")
    assert isinstance(exc.value, KeyNotFoundError)
    assert exc.value.entry.operation is KeyValueOp.DELETE
    assert [h.operation for h in kv.history("a.2")] == [KeyValueOp.PUT, KeyValueOp.DELETE]
    assert kv.purge("b.1") is True
    hist = kv.history("b.1")
    assert len(hist) == 1 and hist[0].operation is KeyValueOp.PURGE
    assert sorted(kv.keys()) == ["a.1", "c"]
    assert kv.keys("a.*") == ["a.1"]
    assert sorted(kv.keys(["a.>", "c"])) == ["a.1", "c"]
    assert kv.keys(["zzz"]) == []
    st = kv.status()
    assert (st.bucket, st.values, st.history, st.ttl, st.replicas) == (bucket, 6, 10, None, 1)
    assert st.bytes > 0 and st.backing_store == "JetStream" and not st.is_compressed


def test_purge_deletes(js, kv, bucket):
    kv.put("gone", b"1")
    kv.put("gone", b"2")
    kv.delete("gone")
    kv.put("wiped", b"1")
    kv.purge("wiped")
    kv.put("live", b"1")
    # young markers stay, what is behind them goes
    assert kv.purge_deletes(older_than=3600) == 2
    assert [h.operation for h in kv.history("gone")] == [KeyValueOp.DELETE]
    assert kv.purge_deletes(older_than=0) == 2
    for key in ("gone", "wiped"):
        with pytest.raises(KeyNotFoundError):
            kv.history(key)
    assert kv.get("live").value == b"1"
    assert js.stream_info(f"KV_{bucket}").state.messages == 1


def test_per_key_ttl_and_max_value_size(js, bucket):
    kv = js.create_key_value(KeyValueConfig(bucket=bucket, storage=MEM, max_value_size=128))
    try:
        kv.create("lease", b"me", msg_ttl=1)
        kv.put("stays", b"x")
        assert kv.get("lease").value == b"me"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                kv.get("lease")
            except KeyNotFoundError:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the per-key TTL did not expire the key")
        assert kv.create("lease", b"you") > 0  # free again
        assert kv.get("stays").value == b"x"
        with pytest.raises(MessageTooBigError) as exc:
            kv.put("big", b"x" * 129)
        assert exc.value.err_code == 10054
    finally:
        js.delete_key_value(bucket)


# -- names ----------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["", ".a", "a.", "a..b", "a b", "a*", "a.>", "ключ", "a:b", 5])
def test_bad_keys(js, key):
    kv = KeyValue(js, "nobucket", "KV_nobucket")  # keys are checked before any call
    for call in (lambda: kv.put(key, b"x"), lambda: kv.get(key), lambda: kv.create(key, b"x"),
                 lambda: kv.update(key, b"x", 1), lambda: kv.delete(key),
                 lambda: kv.purge(key), lambda: kv.history(key)):
        with pytest.raises(InvalidKeyError) as exc:
            call()
        assert exc.value.code == 400


def test_good_odd_keys(shared):
    kv = shared
    for key in ("a-b_c=d/e", "A.B.9", "x"):
        kv.put(key, key.encode())
        assert kv.get(key).value == key.encode()


@pytest.mark.parametrize("name", ["", "a.b", "a b", "a*", "x>", "ü"])
def test_bad_bucket_names(js, name):
    for call in (lambda: js.create_key_value(KeyValueConfig(bucket=name)),
                 lambda: js.key_value(name), lambda: js.delete_key_value(name)):
        with pytest.raises(BadBucketNameError):
            call()


def test_missing_bucket_and_history_limit(js, bucket):
    with pytest.raises(BucketNotFoundError):
        js.key_value(bucket)
    with pytest.raises(BucketNotFoundError):
        js.delete_key_value(bucket)
    with pytest.raises(KeyHistoryTooLargeError):
        js.create_key_value(KeyValueConfig(bucket=bucket, history=65))
    kv = js.create_key_value(bucket=bucket, history=64, storage=MEM)
    js.delete_key_value(bucket)
    for call in (lambda: kv.put("k", b"v"), lambda: kv.get("k"), lambda: kv.keys(),
                 lambda: kv.status()):
        with pytest.raises(BucketNotFoundError):
            call()


# -- concurrency and replication ------------------------------------------------------------
def test_concurrent_cas_increments_end_with_the_exact_count(shared):
    kv, writers, per_writer = shared, 6, 12
    first = kv.put("counter", b"0")
    conflicts = [0] * writers
    errors: list[BaseException] = []

    def work(w: int) -> None:
        try:
            done = 0
            while done < per_writer:
                e = kv.get("counter")
                try:
                    kv.update("counter", str(int(e.value) + 1).encode(), last=e.revision)
                    done += 1
                except KeyWrongLastSequenceError:
                    conflicts[w] += 1
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert not errors and not any(t.is_alive() for t in threads)
    assert int(kv.get("counter").value) == writers * per_writer
    assert len(kv.history("counter")) == 10  # history=10 kept
    assert kv.get("counter").revision - first >= writers * per_writer
    assert sum(conflicts) > 0  # the writers did collide


def test_r3_bucket(js, bucket):
    kv = js.create_key_value(KeyValueConfig(bucket=bucket, history=3, replicas=3, storage=MEM))
    try:
        assert kv.status().replicas == 3
        r = kv.create("k", b"1")
        r = kv.update("k", b"2", last=r)
        with pytest.raises(KeyWrongLastSequenceError):
            kv.update("k", b"x", last=r - 1)
        kv.delete("k")
        kv.create("k", b"3")
        assert kv.get("k").value == b"3"
        assert [h.value for h in kv.history("k")] == [b"2", b"", b"3"]  # history=3
        assert js.key_value(bucket).keys() == ["k"]
    finally:
        js.delete_key_value(bucket)
