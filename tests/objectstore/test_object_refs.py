"""``ObjectStore.get_ref``: objects handed to Ray as object refs, read and checked by a task."""

from __future__ import annotations

import hashlib
import os

import pytest
import ray

from rayjet import StorageType
from rayjet.api import ObjectStoreConfig
from rayjet.errors import (
    DigestMismatchError,
    LinkIsABucketError,
    ObjectDeletedError,
    ObjectNotFoundError,
)

KIB = 1024


@pytest.fixture
def obs(js, stream_name):
    obs = js.create_object_store(ObjectStoreConfig(bucket=stream_name,
                                                   storage=StorageType.MEMORY))
    yield obs
    js.delete_object_store(stream_name)


@ray.remote(num_cpus=0)
def _size_and_digest(data: bytes) -> tuple[int, str]:
    return len(data), hashlib.sha256(data).hexdigest()


def test_multi_chunk_object_read_through_a_ref(obs):
    data = os.urandom(700 * KIB + 5)  # 6 chunks of 128 KiB
    info = obs.put("big.bin", data)
    assert info.chunks == 6
    ref = obs.get_ref("big.bin")
    assert isinstance(ref, ray.ObjectRef)
    assert ray.get(ref, timeout=60) == data


def test_a_task_takes_the_ref_as_an_argument(obs):
    data = os.urandom(300 * KIB)
    obs.put("arg.bin", data)
    got = ray.get(_size_and_digest.remote(obs.get_ref("arg.bin")), timeout=60)
    assert got == (len(data), hashlib.sha256(data).hexdigest())


def test_empty_object_and_links(js, obs):
    empty = obs.put("empty", b"")
    assert ray.get(obs.get_ref("empty"), timeout=60) == b""
    data = os.urandom(200 * KIB)
    target = obs.put("target", data)
    obs.add_link("alias", target)
    assert ray.get(obs.get_ref("alias"), timeout=60) == data
    obs.add_bucket_link("whole", obs)
    with pytest.raises(LinkIsABucketError):
        obs.get_ref("whole")
    assert empty.size == 0


def test_a_tampered_chunk_raises_digest_mismatch_at_ray_get(js, obs):
    data = os.urandom(3 * 128 * KIB)
    info = obs.put("tampered", data)
    subject = f"$O.{obs.bucket}.C.{info.nuid}"
    first = js.get_msg(obs.stream, 1, next_by_subject=subject)
    middle = js.get_msg(obs.stream, first.seq + 1)
    assert js.delete_msg(obs.stream, middle.seq)
    altered = bytes([middle.data[0] ^ 0xFF]) + middle.data[1:]
    js.publish(subject, altered)  # same chunk count and size, other bytes
    ref = obs.get_ref("tampered")  # the info is fine: the error comes with the data
    with pytest.raises(DigestMismatchError) as exc:
        ray.get(ref, timeout=60)
    assert "tampered" in str(exc.value) and "SHA-256" in str(exc.value)


def test_missing_and_deleted_objects_raise_at_get_ref(obs):
    with pytest.raises(ObjectNotFoundError):
        obs.get_ref("nothing")
    obs.put("gone", b"x" * 1000)
    obs.delete("gone")
    with pytest.raises(ObjectDeletedError):
        obs.get_ref("gone")
    assert ray.get(obs.get_ref("gone", show_deleted=True), timeout=60) == b""


def test_deleted_or_replaced_after_lookup_raise_at_ray_get(js, obs):
    data = os.urandom(200 * KIB)
    stale = obs.put("moving", data)
    obs.put("moving", os.urandom(200 * KIB))  # replaced: the looked-up chunks are purged
    with pytest.raises(ObjectNotFoundError) as exc:
        ray.get(js.object_ref(obs.bucket, obs.stream, stale), timeout=60)
    assert "replaced" in str(exc.value)
    current = obs.info("moving")
    obs.delete("moving")
    with pytest.raises(ObjectDeletedError):
        ray.get(js.object_ref(obs.bucket, obs.stream, current), timeout=60)
