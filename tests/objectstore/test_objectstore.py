"""The object store on real stream actors: chunks, digests, streaming, replace, links, seal."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tracemalloc

import pytest

from rayjet import StorageType
from rayjet.api import DiscardPolicy, ObjectMeta, ObjectMetaOptions, ObjectStoreConfig
from rayjet.api import headers as H
from rayjet.errors import (
    BadBucketNameError,
    BadObjectMetaError,
    BucketNotFoundError,
    DigestMismatchError,
    LinkIsABucketError,
    ObjectAlreadySealedError,
    ObjectDeletedError,
    ObjectNotFoundError,
)
from rayjet.objectstore import ObjectStore, bucket_stream_config, encode_name

MEM = StorageType.MEMORY
KIB = 1024


def sha(data: bytes) -> str:
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


@pytest.fixture
def bucket(stream_name):
    return stream_name


@pytest.fixture
def obs(js, bucket):
    obs = js.create_object_store(ObjectStoreConfig(bucket=bucket, storage=MEM))
    yield obs
    js.delete_object_store(bucket)


@pytest.fixture(scope="module")
def shared(js):
    """One store for the tests that only look at their own objects."""
    obs = js.create_object_store(ObjectStoreConfig(bucket="objshared", storage=MEM))
    yield obs
    js.delete_object_store("objshared")


def chunk_subjects(js, obs) -> set[str]:
    info = js.stream_info(obs.stream, subjects_filter=f"$O.{obs.bucket}.C.>")
    return set(info.state.subjects or {})


def test_bucket_stream_config_is_built_as_nats_does():
    cfg = bucket_stream_config(ObjectStoreConfig(bucket="files", ttl=60.0, max_bytes=1 << 30,
                                                 replicas=3, storage=MEM, description="d"))
    assert cfg.name == "OBJ_files"
    assert cfg.subjects == ("$O.files.C.>", "$O.files.M.>")
    assert (cfg.max_age, cfg.max_bytes, cfg.num_replicas, cfg.storage) == (
        60.0, 1 << 30, 3, MEM)
    assert cfg.discard is DiscardPolicy.NEW and cfg.allow_rollup_hdrs and cfg.allow_direct
    assert not cfg.deny_delete and not cfg.deny_purge and cfg.description == "d"


# -- put and get ----------------------------------------------------------------------------
def test_multi_chunk_put_get_with_digest(js, shared):
    data = os.urandom(300 * KIB + 17)
    info = shared.put("dir/a.bin", data)
    assert (info.name, info.bucket, info.size, info.chunks) == (
        "dir/a.bin", "objshared", len(data), 3)
    assert info.digest == sha(data) and len(info.nuid) == 22
    assert info.options.max_chunk_size == 128 * KIB
    res = shared.get("dir/a.bin")
    assert res.data == data and res.info.digest == sha(data) and res.info.mtime is not None
    # the metadata message is on $O.<bucket>.M.<base64url(name)> and holds the info as JSON
    meta = js.get_msg(shared.stream,
                      last_by_subject=f"$O.objshared.M.{encode_name('dir/a.bin')}")
    assert json.loads(meta.data)["digest"] == sha(data)
    assert meta.headers[H.ROLLUP] == "sub"
    # into a file object
    sink = io.BytesIO()
    res = shared.get("dir/a.bin", writeinto=sink)
    assert res.data is None and sink.getvalue() == data


def test_put_from_str_file_and_empty_with_small_chunks(shared, tmp_path):
    assert shared.get(shared.put("text", "héllo").name).data == "héllo".encode()
    path = tmp_path / "f.txt"
    path.write_bytes(b"line\n" * 1000)
    with open(path, "rb") as f:
        info = shared.put("file", f, meta=ObjectMeta(
            name="ignored", options=ObjectMetaOptions(max_chunk_size=1000)))
    assert (info.name, info.chunks, info.size) == ("file", 5, 5000)
    with open(path) as f:  # a text file is read as its bytes
        assert shared.put("textfile", f).size == 5000
    assert shared.get("file").data == b"line\n" * 1000
    empty = shared.put("empty", b"")
    assert (empty.size, empty.chunks, empty.digest) == (0, 0, sha(b""))
    assert shared.get("empty").data == b""


def test_meta_headers_and_update_meta(shared):
    meta = ObjectMeta(name="doc", description="a doc", headers={"Content-Type": "text/plain"},
                      metadata={"owner": "sue"})
    shared.put(None, b"body", meta=meta)
    info = shared.info("doc")
    assert info.description == "a doc" and info.metadata == {"owner": "sue"}
    assert info.headers["Content-Type"] in ("text/plain", ("text/plain",))
    shared.update_meta("doc", ObjectMeta(name="doc2", description="renamed"))
    with pytest.raises(ObjectNotFoundError):
        shared.info("doc")
    assert shared.info("doc2").description == "renamed"
    assert shared.get("doc2").data == b"body"
    shared.put("other", b"x")
    with pytest.raises(BadObjectMetaError):
        shared.update_meta("doc2", ObjectMeta(name="other"))


# -- integrity ------------------------------------------------------------------------------
def test_a_missing_chunk_is_an_error_never_wrong_bytes(js, shared):
    data = os.urandom(3 * 128 * KIB)
    info = shared.put("corrupt", data)
    first = js.get_msg(shared.stream, 1, next_by_subject=f"$O.objshared.C.{info.nuid}")
    assert js.delete_msg(shared.stream, first.seq + 1)  # the middle chunk
    with pytest.raises(DigestMismatchError) as exc:
        shared.get("corrupt")
    assert "corrupt" in str(exc.value)
    with pytest.raises(DigestMismatchError):
        shared.get("corrupt", writeinto=io.BytesIO())


def test_a_wrong_digest_is_detected(js, shared):
    info = shared.put("tampered", b"a" * 1000)
    bad = dict(info.to_dict(), digest=sha(b"b" * 1000))
    js.publish(f"$O.objshared.M.{encode_name('tampered')}", json.dumps(bad).encode(),
               headers={H.ROLLUP: "sub"})
    with pytest.raises(DigestMismatchError):
        shared.get("tampered")


def test_large_object_streams_in_bounded_memory(js, bucket, tmp_path):
    size = 64 << 20
    path = tmp_path / "big.bin"
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        block = os.urandom(1 << 20)
        for i in range(64):
            piece = bytes([i]) + block[1:]
            digest.update(piece)
            f.write(piece)
    obs = js.create_object_store(ObjectStoreConfig(bucket=bucket, storage=MEM))
    try:
        tracemalloc.start()
        try:
            with open(path, "rb") as f:
                info = obs.put("big.bin", f)
            _, put_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            out = tmp_path / "out.bin"
            with open(out, "wb") as f:
                obs.get("big.bin", writeinto=f)
            _, get_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (info.size, info.chunks) == (size, 512)
        assert info.digest == "SHA-256=" + base64.urlsafe_b64encode(digest.digest()).decode()
        assert out.stat().st_size == size
        assert put_peak < 16 << 20, put_peak
        assert get_peak < 16 << 20, get_peak
    finally:
        js.delete_object_store(bucket)


# -- replace --------------------------------------------------------------------------------
class FailingReader(io.RawIOBase):
    """Gives ``good`` bytes, then fails like a broken disk or network."""

    def __init__(self, good: int) -> None:
        self.left = good

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            raise OSError("read failed")
        n = min(n, self.left)
        self.left -= n
        return b"n" * n


def test_replace_is_crash_safe(js, obs):
    old = obs.put("obj", b"o" * (200 * KIB))
    assert chunk_subjects(js, obs) == {f"$O.{obs.bucket}.C.{old.nuid}"}
    # the reader fails half way (after several published groups): the old object stays
    with pytest.raises(OSError):
        obs.put("obj", FailingReader(5 << 20))
    assert obs.get("obj").data == b"o" * (200 * KIB)
    assert chunk_subjects(js, obs) == {f"$O.{obs.bucket}.C.{old.nuid}"}  # new chunks purged
    # the metadata write fails after every chunk is in
    real = obs._publish_meta

    def broken(info):
        raise ConnectionError("lost the leader")

    obs._publish_meta = broken
    with pytest.raises(ConnectionError):
        obs.put("obj", b"n" * (300 * KIB))
    obs._publish_meta = real
    assert obs.get("obj").info.nuid == old.nuid
    assert chunk_subjects(js, obs) == {f"$O.{obs.bucket}.C.{old.nuid}"}
    # a replace that succeeds purges the old chunks
    new = obs.put("obj", b"n" * (300 * KIB))
    assert obs.get("obj").data == b"n" * (300 * KIB)
    assert chunk_subjects(js, obs) == {f"$O.{obs.bucket}.C.{new.nuid}"}


# -- delete, list, status, names ------------------------------------------------------------
def test_delete_list_and_status(js, obs, bucket):
    a = obs.put("a", b"1" * 1000)
    obs.put("b", b"2")
    gone = obs.delete("a")
    assert gone.deleted and gone.size == 0
    with pytest.raises(ObjectDeletedError) as exc:
        obs.info("a")
    assert isinstance(exc.value, ObjectNotFoundError)
    with pytest.raises(ObjectNotFoundError):
        obs.get("a")
    with pytest.raises(ObjectNotFoundError):
        obs.delete("a")
    assert obs.info("a", show_deleted=True).deleted
    assert f"$O.{bucket}.C.{a.nuid}" not in chunk_subjects(js, obs)
    assert sorted((i.name, i.deleted) for i in obs.list()) == [("a", True), ("b", False)]
    assert [i.name for i in obs.list(ignore_deletes=True)] == ["b"]
    with pytest.raises(ObjectNotFoundError):
        obs.get("never")
    st = obs.status()
    assert (st.bucket, st.sealed, st.replicas, st.ttl) == (bucket, False, 1, None)
    assert st.size > 0 and st.storage_type == MEM and st.backing_store == "JetStream"
    # put again over a deleted object
    assert obs.put("a", b"back").size == 4 and obs.get("a").data == b"back"


@pytest.mark.parametrize("name", ["", "a.b", "a b", "x>"])
def test_bad_bucket_names(js, name):
    for call in (lambda: js.create_object_store(ObjectStoreConfig(bucket=name)),
                 lambda: js.object_store(name), lambda: js.delete_object_store(name)):
        with pytest.raises(BadBucketNameError):
            call()


def test_missing_bucket_and_bad_names(js, bucket):
    with pytest.raises(BucketNotFoundError):
        js.object_store(bucket)
    with pytest.raises(BucketNotFoundError):
        js.delete_object_store(bucket)
    obs = ObjectStore(js, bucket, f"OBJ_{bucket}")
    for call in (lambda: obs.put("x", b"1"), lambda: obs.get("x"), lambda: obs.list(),
                 lambda: obs.status()):
        with pytest.raises(BucketNotFoundError):
            call()
    for call in (lambda: obs.put("", b"1"), lambda: obs.info(""),
                 lambda: obs.put("x", 42)):
        with pytest.raises(BadObjectMetaError):
            call()


# -- links and seal -------------------------------------------------------------------------
def test_links(js, obs, shared):
    target = obs.put("target", b"payload")
    link = obs.add_link("ln", target)
    assert link.is_link() and link.options.link.name == "target"
    assert obs.get("ln").data == b"payload"
    # a link in another bucket
    shared.add_link("cross", target)
    assert shared.get("cross").data == b"payload"
    with pytest.raises(BadObjectMetaError):
        obs.add_link("ln2", link)  # no links to links
    blink = obs.add_bucket_link("all", shared)
    assert blink.options.link.bucket == "objshared" and not blink.options.link.name
    with pytest.raises(LinkIsABucketError):
        obs.get("all")
    with pytest.raises(BadObjectMetaError):
        obs.add_link("ln3", blink)
    with pytest.raises(BadObjectMetaError):
        obs.add_link("target", target)  # a link does not replace an object
    obs.delete("target")
    with pytest.raises(BadObjectMetaError):
        obs.add_link("ln4", target)  # no links to deleted objects
    with pytest.raises(ObjectNotFoundError):
        obs.get("ln")  # the link is dangling now
    shared.delete("cross")


def test_seal(obs):
    obs.put("kept", b"k" * 1000)
    obs.seal()
    obs.seal()  # sealing again is harmless
    assert obs.status().sealed
    with pytest.raises(ObjectAlreadySealedError):
        obs.put("new", b"x" * 1000)
    with pytest.raises(ObjectAlreadySealedError):
        obs.delete("kept")
    assert obs.get("kept").data == b"k" * 1000


def test_r3_store(js, bucket):
    obs = js.create_object_store(ObjectStoreConfig(bucket=bucket, replicas=3, storage=MEM))
    try:
        assert obs.status().replicas == 3
        data = os.urandom(260 * KIB)
        obs.put("r3", data)
        assert obs.get("r3").data == data
        obs.put("r3", b"v2")
        assert js.object_store(bucket).get("r3").data == b"v2"
    finally:
        js.delete_object_store(bucket)
