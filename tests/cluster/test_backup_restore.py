"""Stream backup and restore through the Python API: the same messages at the same
sequences, the same consumers at the same positions; damaged archives refused whole."""

from __future__ import annotations

import io

import pytest

from rayjet.api import AckPolicy
from rayjet.errors import APIError, StreamNotFoundError
from rayjet.storage.backup_archive import MAGIC
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401


def _messages(js, name):  # noqa: F811
    out = []
    last = js.stream_info(name).state.last_seq
    router = js._stream(name)[1]
    start = 1
    while start:
        page = router.call("read_range", start, last, timeout=20)
        out += list(zip(page["seq"], page["subject"], page["data"], page["hdr"], page["ts"],
                        strict=True))
        start = page["next"]
    return out


def _stream_with_history(js, name, replicas=1):  # noqa: F811
    js.add_stream(name=name, subjects=[f"{name}.>"], num_replicas=replicas,
                  duplicate_window=120.0)
    for i in range(1, 301):
        js.publish(f"{name}.{i % 7}", f"m{i}".encode() * (i % 5 + 1),
                   headers={"Nats-Msg-Id": f"id{i}"} if i % 10 == 0 else None)
    js.purge_stream(name, seq=21)  # 1..20 purged
    for seq in (50, 51, 120, 300):
        js.delete_msg(name, seq)
    js.add_consumer(name, durable_name="WORK", ack_policy=AckPolicy.EXPLICIT, ack_wait=30.0)


@pytest.mark.parametrize("replicas", [1, 3])
def test_backup_then_restore_gives_the_same_stream_and_consumers(js, stream_name, tmp_path,  # noqa: F811
                                                                 drop_new_streams, replicas):  # noqa: F811
    _stream_with_history(js, stream_name, replicas)
    sub = js.pull_subscribe(f"{stream_name}.>", durable="WORK", stream=stream_name)
    msgs = sub.fetch(40, timeout=10)
    for m in msgs[:25]:
        m.ack_sync()
    js.add_consumer(stream_name, durable_name="ALL", ack_policy=AckPolicy.ALL)
    before_msgs = _messages(js, stream_name)
    before = js.stream_info(stream_name).state
    work = js.consumer_info(stream_name, "WORK")

    path = tmp_path / "b.rjb"
    summary = js.backup_stream(stream_name, path)
    assert summary.messages == before.messages == len(before_msgs)
    assert summary.consumers == 2

    js.delete_stream(stream_name)
    info = js.restore_stream(path)
    assert info.config.name == stream_name
    st = info.state
    assert (st.first_seq, st.last_seq, st.messages, st.bytes, st.num_deleted) == (
        before.first_seq, before.last_seq, before.messages, before.bytes, before.num_deleted)
    assert _messages(js, stream_name) == before_msgs
    again = js.consumer_info(stream_name, "WORK")
    assert (again.delivered, again.ack_floor, again.num_ack_pending, again.num_pending) == (
        work.delivered, work.ack_floor, work.num_ack_pending, work.num_pending)
    assert sorted(js.consumer_names(stream_name)) == ["ALL", "WORK"]
    # the restored consumer goes on after the restored position
    sub = js.pull_subscribe(f"{stream_name}.>", durable="WORK", stream=stream_name)
    nxt = sub.fetch(1, timeout=10)
    assert nxt[0].metadata.sequence.stream > work.delivered.stream_seq
    # dedup ids came back, publishes continue after the last sequence
    assert js.publish(f"{stream_name}.x", b"dup", headers={"Nats-Msg-Id": "id290"}).duplicate
    assert js.publish(f"{stream_name}.x", b"new").seq == before.last_seq + 1


def test_restore_under_another_name_and_refusals(js, stream_name, tmp_path,  # noqa: F811
                                                drop_new_streams):  # noqa: F811
    _stream_with_history(js, stream_name)
    path = tmp_path / "b.rjb"
    js.backup_stream(stream_name, path, consumers=False)
    # the stream still exists: 10130
    with pytest.raises(APIError) as err:
        js.restore_stream(path)
    assert err.value.err_code == 10130
    cfg = js.stream_info(stream_name).config.to_dict()
    other = stream_name + "B"
    cfg.update(name=other, subjects=[f"{other}.>"])
    info = js.restore_stream(path, config=cfg)
    assert info.state.last_seq == js.stream_info(stream_name).state.last_seq
    assert js.consumer_names(other) == []


def test_a_damaged_backup_is_refused_whole(js, stream_name, tmp_path,  # noqa: F811
                                          drop_new_streams):  # noqa: F811
    _stream_with_history(js, stream_name)
    raw = b"".join(js.backup_chunks(stream_name))
    js.delete_stream(stream_name)
    for damaged in (raw[:-7], raw[: len(raw) // 2], bytearray(raw), raw + b"x"):
        if isinstance(damaged, bytearray):
            damaged[len(MAGIC) + 200] ^= 0x10
        with pytest.raises(APIError) as err:
            js.restore_stream(io.BytesIO(bytes(damaged)))
        assert err.value.err_code == 10062, err.value
        with pytest.raises(StreamNotFoundError):
            js.stream_info(stream_name)
    assert js.restore_stream(io.BytesIO(raw)).state.messages > 0


def test_a_key_value_bucket_comes_back_from_its_backup(js, tmp_path,  # noqa: F811
                                                      drop_new_streams):  # noqa: F811
    kv = js.create_key_value(bucket="BACKEDKV", history=3)
    for i in range(5):
        kv.put("color", f"c{i}")
    kv.put("size", "10")
    kv.delete("size")
    path = tmp_path / "kv.rjb"
    js.backup_stream("KV_BACKEDKV", path)
    js.delete_key_value("BACKEDKV")
    js.restore_stream(path)
    kv = js.key_value("BACKEDKV")
    assert kv.get("color").value == b"c4" and kv.get("color").revision == 5
    assert [e.value for e in kv.history("color")] == [b"c2", b"c3", b"c4"]
    assert kv.put("color", "c5") == 8
