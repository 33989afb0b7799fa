import dataclasses
import json
import pickle
from datetime import UTC, datetime, timedelta

import pytest

import rayjet.api as api
import rayjet.subjects
from rayjet.api import (
    AckPolicy,
    ClusterInfo,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    DiscardPolicy,
    ExternalStream,
    FrozenDict,
    KeyValueConfig,
    ObjectInfo,
    ObjectLink,
    ObjectMetaOptions,
    ObjectStoreConfig,
    PeerInfo,
    PersistMode,
    Placement,
    PriorityPolicy,
    PubAck,
    RawStreamMsg,
    ReplayPolicy,
    RePublish,
    RetentionPolicy,
    SequenceInfo,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamConsumerLimits,
    StreamInfo,
    StreamSource,
    StreamSourceInfo,
    StreamState,
    SubjectTransform,
    SubjectTransformConfig,
)
from rayjet.errors import InvalidConfigError

T0 = datetime(2024, 3, 1, 10, 0, 0, 123456, tzinfo=UTC)

# seed 004: the two stream definitions of the multi-region walkthrough, unchanged
SEED_WRITE = json.loads("""{
"name": "foo-write-west", "subjects": ["foo.west.>"], "retention": "limits",
"max_consumers": -1, "max_msgs_per_subject": -1, "max_msgs": -1, "max_bytes": -1,
"max_age": 3600000000000, "max_msg_size": -1, "storage": "file", "discard": "old",
"num_replicas": 3, "duplicate_window": 120000000000, "placement": {"cluster": "west"},
"sealed": false, "deny_delete": false, "deny_purge": false, "allow_rollup_hdrs": false,
"allow_direct": false, "mirror_direct": false}""")
SEED_READ = json.loads("""{
"name": "foo-read-west", "retention": "limits", "max_consumers": -1,
"max_msgs_per_subject": -1, "max_msgs": -1, "max_bytes": -1, "max_age": 0,
"max_msg_size": -1, "storage": "file", "discard": "old", "num_replicas": 3,
"duplicate_window": 120000000000, "placement": {"cluster": "west"},
"subject_transform": {"src": "foo.*.>", "dest": "foo.>"},
"sources": [{"name": "foo-write-west", "filter_subject": "foo.west.>"},
            {"name": "foo-write-east", "filter_subject": "foo.east.>"},
            {"name": "foo-write-central", "filter_subject": "foo.central.>"}],
"sealed": false, "deny_delete": false, "deny_purge": false, "allow_rollup_hdrs": false,
"allow_direct": false, "mirror_direct": false}""")


@pytest.mark.parametrize("doc", [SEED_WRITE, SEED_READ], ids=["write", "read"])
def test_seed_stream_definitions_load_and_round_trip(doc):
    cfg = StreamConfig.from_dict(doc)
    out = cfg.to_dict()
    for key, value in doc.items():
        assert out[key] == value, key
    assert StreamConfig.from_dict(out) == cfg
    assert api.validate_stream_config(cfg) is not None


def test_seed_values_in_python_units():
    w = StreamConfig.from_dict(SEED_WRITE)
    assert w.max_age == 3600.0 and w.duplicate_window == 120.0
    assert w.subjects == ("foo.west.>",) and w.placement == Placement(cluster="west")
    assert w.storage is StorageType.FILE and w.retention is RetentionPolicy.LIMITS
    r = StreamConfig.from_dict(SEED_READ)
    assert r.subject_transform == SubjectTransform("foo.*.>", "foo.>")
    assert [s.name for s in r.sources] == ["foo-write-west", "foo-write-east",
                                          "foo-write-central"]


def test_construction_ergonomics():
    cfg = StreamConfig(name="ORDERS", subjects=["ORDERS.*"], storage="memory",
                       max_age=timedelta(hours=1), duplicate_window="30s",
                       metadata={"team": "a"}, placement={"cluster": "c1", "tags": ["x"]})
    assert cfg.subjects == ("ORDERS.*",)
    assert cfg.storage is StorageType.MEMORY
    assert cfg.max_age == 3600.0 and cfg.duplicate_window == 30.0
    assert cfg.placement == Placement(cluster="c1", tags=("x",))
    assert isinstance(cfg.metadata, FrozenDict) and cfg.metadata == {"team": "a"}
    assert hash(cfg) == hash(StreamConfig.from_dict(cfg.to_dict()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.name = "X"  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.metadata["team"] = "b"
    other = dataclasses.replace(cfg, subjects=["A", "B"])
    assert other.subjects == ("A", "B") and other.name == "ORDERS"


def test_nested_dict_with_unknown_key_is_a_config_error():
    with pytest.raises(InvalidConfigError, match="Placement"):
        StreamConfig(name="X", placement={"zone": "a"})


def test_bad_enum_is_a_config_error():
    with pytest.raises(InvalidConfigError) as exc:
        StreamConfig(name="X", storage="disk")
    assert exc.value.err_code == 10052
    assert "'file'" in exc.value.description


def test_unknown_fields_are_ignored_unless_strict():
    doc = dict(SEED_WRITE, template_owner="", some_future_field=1)
    assert StreamConfig.from_dict(doc).name == "foo-write-west"
    with pytest.raises(InvalidConfigError, match="some_future_field"):
        StreamConfig.from_dict(doc, strict=True)


def test_python_names_accepted_in_from_dict():
    cfg = StreamConfig.from_dict({"name": "S", "allow_atomic_publish": True})
    assert cfg.allow_atomic_publish and cfg.to_dict()["allow_atomic"] is True
    cfg = StreamConfig.from_dict({"name": "S", "allow_atomic": True})
    assert cfg.allow_atomic_publish


def _full_stream() -> StreamConfig:
    return StreamConfig(
        name="FULL", description="d", subjects=["a.*", "b.>"],
        retention=RetentionPolicy.INTEREST, max_consumers=10, max_msgs=100, max_bytes=1 << 20,
        max_age=86400.0, max_msgs_per_subject=5, max_msg_size=1024, discard=DiscardPolicy.NEW,
        discard_new_per_subject=True, storage=StorageType.MEMORY, num_replicas=3, no_ack=True,
        duplicate_window=60.0, placement=Placement(cluster="c", tags=["t1"]),
        sources=[StreamSource(name="O", opt_start_seq=5, opt_start_time=T0,
                              subject_transforms=[SubjectTransformConfig("x.*", "y.{{wildcard(1)}}")],
                              external=ExternalStream(api="$JS.hub.API", deliver="dlv"))],
        allow_rollup_hdrs=True, allow_direct=True, republish=RePublish("a.*", "rp.a.*", True),
        subject_transform=SubjectTransformConfig("a.*", "c.$1"),
        compression=StoreCompression.S2, first_seq=10, metadata={"k": "v"},
        consumer_limits=StreamConsumerLimits(inactive_threshold=30.0, max_ack_pending=50),
        allow_msg_ttl=True, subject_delete_marker_ttl=60.0, allow_atomic_publish=True,
        allow_msg_schedules=True, persist_mode=PersistMode.ASYNC)


def _full_consumer() -> ConsumerConfig:
    return ConsumerConfig(
        durable_name="D", name="D", description="d", deliver_policy=DeliverPolicy.BY_START_TIME,
        opt_start_time=T0, ack_policy=AckPolicy.ALL, ack_wait=10.0, max_deliver=5,
        backoff=[1.0, 2.5, 10.0], filter_subjects=["a.1", "a.2"],
        replay_policy=ReplayPolicy.ORIGINAL, rate_limit_bps=1000, sample_freq="50%",
        max_waiting=0, max_ack_pending=20, flow_control=True, idle_heartbeat=5.0,
        headers_only=True, deliver_subject="push.D", deliver_group="g",
        inactive_threshold=300.0, num_replicas=1, mem_storage=True, metadata={"x": "y"},
        pause_until=T0, max_request_expires=1.5)


def test_stream_round_trip_full():
    cfg = _full_stream()
    wire = cfg.to_dict()
    assert wire["max_age"] == 86_400_000_000_000
    assert wire["duplicate_window"] == 60_000_000_000
    assert wire["sources"][0]["opt_start_time"] == "2024-03-01T10:00:00.123456Z"
    assert wire["sources"][0]["subject_transforms"] == [{"src": "x.*",
                                                         "dest": "y.{{wildcard(1)}}"}]
    assert wire["consumer_limits"] == {"inactive_threshold": 30_000_000_000,
                                       "max_ack_pending": 50}
    assert wire["allow_atomic"] is True and wire["persist_mode"] == "async"
    assert wire["retention"] == "interest" and wire["compression"] == "s2"
    back = StreamConfig.from_dict(json.loads(json.dumps(wire)))
    assert back == cfg


def test_consumer_round_trip_full():
    cfg = _full_consumer()
    wire = cfg.to_dict()
    assert wire["backoff"] == [1_000_000_000, 2_500_000_000, 10_000_000_000]
    assert wire["ack_wait"] == 10_000_000_000 and wire["idle_heartbeat"] == 5_000_000_000
    assert wire["max_expires"] == 1_500_000_000 and "max_request_expires" not in wire
    assert wire["opt_start_time"] == "2024-03-01T10:00:00.123456Z"
    assert wire["deliver_policy"] == "by_start_time" and wire["ack_policy"] == "all"
    back = ConsumerConfig.from_dict(json.loads(json.dumps(wire)))
    assert back == cfg
    pulled = ConsumerConfig(durable_name="P", max_request_batch=10, max_request_max_bytes=99,
                            priority_groups=["g1"], priority_policy=PriorityPolicy.OVERFLOW)
    wire = pulled.to_dict()
    assert wire["max_batch"] == 10 and wire["max_bytes"] == 99
    assert wire["priority_policy"] == "overflow"
    assert ConsumerConfig.from_dict(wire) == pulled


def test_consumer_from_server_json():
    doc = {
        "durable_name": "DISPATCH", "name": "DISPATCH", "deliver_policy": "all",
        "ack_policy": "explicit", "ack_wait": 30000000000, "max_deliver": -1,
        "filter_subject": "ORDERS.processed", "replay_policy": "instant", "max_waiting": 512,
        "max_ack_pending": 1000, "num_replicas": 0, "sample_freq": "",
    }
    cfg = ConsumerConfig.from_dict(doc)
    assert cfg.ack_wait == 30.0 and cfg.is_pull and cfg.consumer_name == "DISPATCH"
    assert cfg.filters == ("ORDERS.processed",)


def test_stream_info_from_server_json():
    doc = {
        "config": SEED_WRITE,
        "created": "2024-03-01T10:00:00.123456789Z",
        "state": {"messages": 3, "bytes": 120, "first_seq": 1,
                  "first_ts": "2024-03-01T10:00:01.5Z", "last_seq": 3,
                  "last_ts": "2024-03-01T10:00:02Z", "num_subjects": 2, "consumer_count": 1,
                  "num_deleted": 1, "deleted": [2], "subjects": {"foo.west.a": 2}},
        "cluster": {"name": "C1", "leader": "n1", "leader_since": "2024-03-01T10:00:00Z",
                    "replicas": [{"name": "n2", "current": True, "active": 12_000_000,
                                  "peer": "abc"}]},
        "sources": [{"name": "O", "lag": 4, "active": 500_000_000,
                     "error": {"code": 503, "err_code": 10008, "description": "x"}}],
        "ts": "2024-03-01T10:00:03Z",
    }
    info = StreamInfo.from_dict(doc)
    assert info.config.name == "foo-write-west"
    assert info.created == T0
    assert info.state.messages == 3 and info.state.deleted == (2,)
    assert info.state.first_ts == datetime(2024, 3, 1, 10, 0, 1, 500000, tzinfo=UTC)
    assert info.state.subjects == {"foo.west.a": 2}
    assert info.cluster.replicas[0] == PeerInfo(name="n2", current=True, active=0.012,
                                                peer="abc")
    assert info.sources[0].active == 0.5 and info.sources[0].error["err_code"] == 10008
    assert info.timestamp == datetime(2024, 3, 1, 10, 0, 3, tzinfo=UTC)
    assert StreamInfo.from_dict(info.to_dict()) == info
    hash(info)


def test_empty_stream_state_zero_times():
    state = StreamState.from_dict({"messages": 0, "bytes": 0, "first_seq": 0,
                                   "first_ts": "0001-01-01T00:00:00Z", "last_seq": 0,
                                   "last_ts": "0001-01-01T00:00:00Z", "consumer_count": 0})
    assert state.first_ts is None and state.last_ts is None


def test_consumer_info_round_trip():
    info = ConsumerInfo(
        stream_name="ORDERS", name="D", config=_full_consumer(), created=T0,
        delivered=SequenceInfo(consumer_seq=3, stream_seq=7, last_active=T0),
        ack_floor=SequenceInfo(2, 5), num_ack_pending=1, num_redelivered=0, num_waiting=0,
        num_pending=4, cluster=ClusterInfo(name="c", leader="n1"), pause_remaining=2.0)
    wire = info.to_dict()
    assert wire["delivered"] == {"consumer_seq": 3, "stream_seq": 7,
                                 "last_active": "2024-03-01T10:00:00.123456Z"}
    assert wire["pause_remaining"] == 2_000_000_000
    assert ConsumerInfo.from_dict(json.loads(json.dumps(wire))) == info


def test_pub_ack():
    ack = PubAck.from_dict({"stream": "ORDERS", "seq": 22})
    assert ack == PubAck("ORDERS", 22) and not ack.duplicate
    assert ack.to_dict() == {"stream": "ORDERS", "seq": 22}
    dup = PubAck(stream="S", seq=1, duplicate=True, domain="hub", val="5", batch="b", count=3)
    assert PubAck.from_dict(dup.to_dict()) == dup


def test_raw_stream_msg_base64():
    doc = {"subject": "a.b", "seq": 5, "data": "aGVsbG8=",
           "hdrs": "TkFUUy8xLjANCkZvbzogYmFyDQoNCg==", "time": "2024-03-01T10:00:00Z"}
    msg = RawStreamMsg.from_dict(doc)
    assert msg.data == b"hello" and msg.headers == {"Foo": "bar"} and msg.sequence == 5
    assert RawStreamMsg.from_dict(msg.to_dict()) == msg


def test_source_info_and_kv_object_configs_round_trip():
    for value in (
        StreamSourceInfo(name="O", lag=1, active=-1.0, filter_subject="x.>",
                         subject_transforms=[SubjectTransformConfig("x.>", "y.>")]),
        KeyValueConfig(bucket="profiles", history=5, ttl=3600.0, replicas=3,
                       republish=RePublish(dest="rp.>"), limit_marker_ttl=5.0,
                       metadata={"a": "b"}),
        ObjectStoreConfig(bucket="files", ttl=60.0, storage="memory", compression=True),
        ObjectInfo(name="big.bin", bucket="files", nuid="N", size=10, mtime=T0, chunks=1,
                   digest="SHA-256=abc", headers={"Content-Type": "text/plain"},
                   options=ObjectMetaOptions(link=ObjectLink(bucket="other", name="x"),
                                             max_chunk_size=1024)),
    ):
        assert type(value).from_dict(json.loads(json.dumps(value.to_dict()))) == value


def test_object_info_go_headers_shape():
    info = ObjectInfo.from_dict({"name": "a", "bucket": "b", "nuid": "n", "size": 1,
                                 "mtime": "2024-03-01T10:00:00Z", "chunks": 1,
                                 "headers": {"X": ["1", "2"]}})
    assert info.headers == {"X": "2"} and not info.is_link()
    assert info.to_dict()["headers"] == {"X": ["2"]}
    assert info.meta.name == "a"


def test_pickle_and_hash():
    for value in (_full_stream(), _full_consumer(), FrozenDict(a="1")):
        again = pickle.loads(pickle.dumps(value))
        assert again == value and hash(again) == hash(value)


def test_exports():
    assert api.SubjectTransform is SubjectTransformConfig
    assert rayjet.subjects.SubjectTransform is not SubjectTransformConfig
    for name in api.__all__:
        assert hasattr(api, name), name


def test_properties():
    cfg = StreamConfig(name="S", allow_rollup_hdrs=True, num_replicas=3)
    assert cfg.allow_rollup and cfg.replicas == 3 and not cfg.is_mirror
    c = ConsumerConfig(name="E", deliver_subject="d")
    assert c.is_push and not c.is_pull and not c.is_durable and c.consumer_name == "E"
