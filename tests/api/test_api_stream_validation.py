import dataclasses

import pytest

from rayjet.api import (
    STREAM_EDITABLE,
    DiscardPolicy,
    ExternalStream,
    PersistMode,
    Placement,
    RePublish,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamSource,
    SubjectTransform,
    stream_defaults,
    validate_stream_config,
    validate_stream_update,
)
from rayjet.errors import InvalidConfigError

M = StreamSource(name="ORIGIN")


def test_defaults_as_nats_server_applies_them():
    cfg = validate_stream_config(StreamConfig(name="ORDERS"))
    assert cfg.subjects == ("ORDERS",)
    assert cfg.duplicate_window == 120.0
    assert (cfg.max_msgs, cfg.max_bytes, cfg.max_msgs_per_subject, cfg.max_msg_size,
            cfg.max_consumers) == (-1, -1, -1, -1, -1)
    assert cfg.num_replicas == 1 and cfg.storage is StorageType.FILE
    assert cfg.retention is RetentionPolicy.LIMITS and cfg.discard is DiscardPolicy.OLD


def test_defaults_details():
    assert stream_defaults(StreamConfig(name="S", max_age=30)).duplicate_window == 30.0
    assert stream_defaults(StreamConfig(name="S", max_age=3600)).duplicate_window == 120.0
    zeroed = stream_defaults(StreamConfig(name="S", max_msgs=0, max_bytes=-7, num_replicas=0))
    assert (zeroed.max_msgs, zeroed.max_bytes, zeroed.num_replicas) == (-1, -1, 1)
    mirror = stream_defaults(StreamConfig(name="M", mirror=M))
    assert mirror.subjects == () and mirror.duplicate_window == 0.0
    sourced = stream_defaults(StreamConfig(name="S", sources=[M]))
    assert sourced.subjects == ()
    assert stream_defaults(StreamConfig(name="S", placement=Placement())).placement is None
    assert stream_defaults(StreamConfig(name="S", republish=RePublish(dest="x.>"))) \
        .republish.src == ">"
    assert StreamConfig(name="S").with_defaults() == stream_defaults(StreamConfig(name="S"))


def test_valid_configs_pass():
    for cfg in (
        StreamConfig(name="ORDERS", subjects=["ORDERS.*"], num_replicas=5, max_age=0.1),
        StreamConfig(name="ALL", subjects=[">"], no_ack=True),
        StreamConfig(name="KV_x", subjects=["$KV.x.>"], allow_rollup_hdrs=True, deny_delete=True,
                     discard=DiscardPolicy.NEW, max_msgs_per_subject=1,
                     discard_new_per_subject=True, allow_direct=True),
        StreamConfig(name="EV", subjects=["$JS.EVENT.>"]),
        StreamConfig(name="MIR", mirror=StreamSource(name="O", filter_subject="a.>"),
                     mirror_direct=True),
        StreamConfig(name="AGG", sources=[StreamSource(name="A"), StreamSource(
            name="A", filter_subject="x.>"), StreamSource(name="A", external=ExternalStream(
                api="$JS.hub.API"))]),
        StreamConfig(name="RP", subjects=["a.>"], republish=RePublish(src="a.*", dest="b.$1")),
        StreamConfig(name="TR", subjects=["in.>"], subject_transform=SubjectTransform(
            "in.*.>", "out.{{wildcard(1)}}.>")),
        StreamConfig(name="C", allow_msg_counter=True),
        StreamConfig(name="ASYNC", persist_mode=PersistMode.ASYNC),
        StreamConfig(name="x" * 255),
    ):
        assert validate_stream_config(cfg).name == cfg.name


def test_delete_markers_switch_on_ttl_and_rollups():
    cfg = validate_stream_config(StreamConfig(name="S", subject_delete_marker_ttl=5,
                                              deny_purge=True))
    assert cfg.allow_msg_ttl and cfg.allow_rollup_hdrs and not cfg.deny_purge
    cfg = validate_stream_config(StreamConfig(name="S", allow_msg_schedules=True))
    assert cfg.allow_rollup_hdrs


def test_implicit_republish_of_transformed_subject():
    cfg = validate_stream_config(StreamConfig(
        name="S", subjects=["in.>"], subject_transform=SubjectTransform("in.>", "out.>"),
        republish=RePublish(src=">", dest=">")))
    assert cfg.republish == RePublish(src="out.>", dest="out.>")


S = dict(name="S")
BAD = [
    # names
    (dict(name=""), 10052, "name"),
    (dict(name="a.b"), 10052, "'.'"),
    (dict(name="a b"), 10052, "whitespace"),
    (dict(name="a*"), 10052, "'*'"),
    (dict(name="a>"), 10052, "'>'"),
    (dict(name="a\tb"), 10052, "whitespace"),
    (dict(name="a\x01b"), 10052, "non-printable"),
    (dict(name="a/b"), 10128, "path separators"),
    (dict(name="a\\b"), 10128, "path separators"),
    (dict(name="x" * 256), 10052, "255"),
    (dict(S, description="d" * 4097), 10052, "description"),
    (dict(S, metadata={"k": "v" * (128 * 1024)}), 10052, "metadata"),
    # create-only
    (dict(S, sealed=True), 10052, "sealed"),
    (dict(S, mirror_direct=True), 10052, "mirror_direct"),
    # replicas and limits
    (dict(S, num_replicas=6), 10052, "maximum replicas is 5"),
    (dict(S, num_replicas=-1), 10133, "negative"),
    (dict(S, first_seq=-1), 10052, "first_seq"),
    (dict(S, max_age=-1), 10052, "negative"),
    (dict(S, max_age=0.05), 10052, ">= 100ms"),
    (dict(S, duplicate_window=-1), 10052, "negative"),
    (dict(S, max_age=60, duplicate_window=120), 10052, "larger than max_age"),
    (dict(S, duplicate_window=0.05), 10052, ">= 100ms"),
    # features
    (dict(S, deny_purge=True, allow_rollup_hdrs=True), 10052, "purge permission"),
    (dict(S, discard_new_per_subject=True, max_msgs_per_subject=1), 10052, "discard=new"),
    (dict(S, discard_new_per_subject=True, discard="new"), 10052, "max_msgs_per_subject"),
    (dict(S, allow_msg_counter=True, discard="new"), 10052, "discard new"),
    (dict(S, allow_msg_counter=True, allow_msg_ttl=True), 10052, "TTL"),
    (dict(S, allow_msg_counter=True, allow_msg_schedules=True), 10052, "schedules"),
    (dict(S, allow_msg_counter=True, retention="interest"), 10052, "limits retention"),
    (dict(S, subject_delete_marker_ttl=0.5), 10052, "at least 1 second"),
    (dict(S, subject_delete_marker_ttl=-1), 10052, "negative"),
    (dict(S, allow_msg_schedules=True, discard="new"), 10052, "discard new"),
    (dict(S, persist_mode="async", storage="memory"), 10052, "file storage"),
    (dict(S, persist_mode="async", num_replicas=3), 10052, "replicated"),
    (dict(S, persist_mode="async", allow_atomic_publish=True), 10052, "atomic"),
    # mirrors
    (dict(S, mirror=M, subjects=["a"]), 10034, "subjects"),
    (dict(S, mirror=M, sources=[M]), 10031, "sources"),
    (dict(S, mirror=M, first_seq=5), 10143, "first sequence"),
    (dict(S, mirror=M, allow_msg_counter=True), 10173, "counters"),
    (dict(S, mirror=M, allow_atomic_publish=True), 10198, "atomic"),
    (dict(S, mirror=M, allow_msg_schedules=True), 10186, "schedule"),
    (dict(S, mirror=M, subject_delete_marker_ttl=5), 10052, "mirrors"),
    (dict(S, mirror=StreamSource(name="O", filter_subject="a", subject_transforms=[
        SubjectTransform("a", "b")])), 10150, "filter"),
    (dict(S, mirror=StreamSource(name="O", subject_transforms=[
        SubjectTransform("a.*", "b.$1"), SubjectTransform("a.x", "c")])), 10152, "overlap"),
    (dict(S, mirror=StreamSource(name="O", subject_transforms=[
        SubjectTransform("a..b", "c")])), 10151, ""),
    (dict(S, mirror=StreamSource(name="O", subject_transforms=[
        SubjectTransform("a.*", "b.$2")])), 10154, ""),
    (dict(S, mirror=StreamSource(name="bad.name")), 10142, "name"),
    (dict(S, mirror=StreamSource(name="O", filter_subject="a..b")), 10052, "filter_subject"),
    # sources
    (dict(S, sources=[StreamSource(name="a b")]), 10141, "name"),
    (dict(S, sources=[M, M]), 10140, "duplicate"),
    (dict(S, sources=[StreamSource(name="O", filter_subject="a.>"),
                      StreamSource(name="O", filter_subject="a.>")]), 10140, "duplicate"),
    (dict(S, sources=[StreamSource(name="O", filter_subject="a", subject_transforms=[
        SubjectTransform("a", "b")])]), 10144, "filter"),
    (dict(S, sources=[StreamSource(name="O", subject_transforms=[
        SubjectTransform("a.>", "b.>"), SubjectTransform("a.b", "c")])]), 10147, "overlap"),
    (dict(S, sources=[StreamSource(name="O", subject_transforms=[
        SubjectTransform("a.*", "{{nope(1)}}")])]), 10146, ""),
    (dict(S, sources=[M], allow_msg_schedules=True), 10187, "schedule"),
    (dict(S, sources=[StreamSource(name="O", external=ExternalStream(
        api="$JS.hub.API", deliver="dl.*"))]), 10024, "dl.*"),
    (dict(S, sources=[StreamSource(name="O", external=ExternalStream(api="$JS.API"))]),
     10021, "$JS.API"),
    (dict(S, sources=[StreamSource(name="O", external=ExternalStream(api="a.>"))]),
     10052, "api prefix"),
    # subjects
    (dict(S, subjects=["a..b"]), 10052, "invalid subject"),
    (dict(S, subjects=["a.>.b"]), 10052, "invalid subject"),
    (dict(S, subjects=["a b"]), 10052, "invalid subject"),
    (dict(S, subjects=["a", "a"]), 10052, "duplicate"),
    (dict(S, subjects=["a.*", "a.b"]), 10052, "overlaps"),
    (dict(S, subjects=["a.>", "a.b.c"]), 10052, "overlaps"),
    (dict(S, subjects=[">"]), 10052, "no_ack"),
    (dict(S, subjects=[">"], no_ack=True, num_replicas=3), 10052, "num_replicas=1"),
    (dict(S, subjects=["$JS.API.>"]), 10052, "JetStream API"),
    (dict(S, subjects=["$SYS.>"]), 10052, "system API"),
    # transforms, republish, placement
    (dict(S, subject_transform=SubjectTransform("a..b", "c")), 10155, ""),
    (dict(S, subject_transform=SubjectTransform("a.*", "b.$3")), 10156, ""),
    (dict(S, subjects=["a.>"], republish=RePublish(src="a.>", dest="a.x.>")), 10052, "cycle"),
    (dict(S, subjects=["a.>"], republish=RePublish(src="z.>", dest="b.>")), 10052,
     "matches none"),
    (dict(S, subjects=["a.>"], republish=RePublish(src="a.*", dest="b.$2")), 10052,
     "not valid"),
    (dict(S, subjects=["a.>"], republish=RePublish(src="a.>")), 10052, "destination"),
    (dict(S, placement=Placement(preferred="n1")), 10052, "preferred"),
]


@pytest.mark.parametrize("kwargs, err_code, fragment", BAD,
                         ids=[f"{i}-{e}" for i, (_, e, _) in enumerate(BAD)])
def test_invalid_stream_configs(kwargs, err_code, fragment):
    with pytest.raises(InvalidConfigError) as exc:
        validate_stream_config(StreamConfig(**kwargs))
    assert exc.value.err_code == err_code, str(exc.value)
    assert fragment in str(exc.value)


def test_not_a_config():
    with pytest.raises(InvalidConfigError):
        validate_stream_config({"name": "S"})  # type: ignore[arg-type]


def test_validate_method():
    assert StreamConfig(name="S").validate().subjects == ("S",)


# -- updates --------------------------------------------------------------------------------
BASE = validate_stream_config(StreamConfig(name="S", subjects=["s.>"]))


def test_editable_table_covers_every_field():
    assert set(STREAM_EDITABLE) == set(StreamConfig.__dataclass_fields__)


GOOD_UPDATES = [
    dict(subjects=["s.>", "t.>"]), dict(num_replicas=3), dict(max_age=3600),
    dict(max_bytes=1024), dict(max_msgs=10), dict(max_msg_size=100), dict(no_ack=True),
    dict(discard="new"), dict(duplicate_window=10), dict(placement=Placement(cluster="c")),
    dict(sources=[M]), dict(max_msgs_per_subject=3), dict(description="x"),
    dict(allow_rollup_hdrs=True), dict(republish=RePublish(dest="r.>")), dict(allow_direct=True),
    dict(metadata={"a": "b"}), dict(compression="s2"),
    dict(subject_transform=SubjectTransform("s.>", "u.>")), dict(allow_msg_ttl=True),
    dict(subject_delete_marker_ttl=5), dict(allow_atomic_publish=True),
    dict(allow_msg_schedules=True), dict(retention="interest"),
]


@pytest.mark.parametrize("changes", GOOD_UPDATES, ids=lambda c: next(iter(c)))
def test_editable_fields(changes):
    new = validate_stream_update(BASE, dataclasses.replace(BASE, **changes))
    assert new.name == "S"


BAD_UPDATES = [
    (dict(name="T"), 10052, "name must match"),
    (dict(storage="memory"), 10052, "storage"),
    (dict(retention="workqueue"), 10052, "workqueue"),
    (dict(max_consumers=5), 10052, "max_consumers"),
    (dict(first_seq=5), 10052, "first_seq"),
    (dict(deny_delete=True), 10052, "deny_delete"),
    (dict(deny_purge=True), 10052, "deny_purge"),
    (dict(allow_msg_counter=True), 10052, "counter"),
    (dict(persist_mode="async"), 10052, "persist mode"),
    (dict(subjects=[], mirror=M), 10055, "mirror"),
]


@pytest.mark.parametrize("changes, err_code, fragment", BAD_UPDATES,
                         ids=lambda c: next(iter(c)) if isinstance(c, dict) else str(c))
def test_fixed_fields(changes, err_code, fragment):
    with pytest.raises(InvalidConfigError) as exc:
        validate_stream_update(BASE, dataclasses.replace(BASE, **changes))
    assert exc.value.err_code == err_code
    assert fragment in str(exc.value)


def test_enable_only_and_once_fields():
    on = dataclasses.replace(BASE, allow_msg_ttl=True, allow_msg_schedules=True,
                             allow_rollup_hdrs=True)
    for field in ("allow_msg_ttl", "allow_msg_schedules"):
        with pytest.raises(InvalidConfigError, match="disabled"):
            validate_stream_update(on, dataclasses.replace(on, **{field: False}))
    sealed = validate_stream_update(BASE, dataclasses.replace(BASE, sealed=True, max_age=3600))
    assert sealed.sealed and sealed.deny_delete and sealed.deny_purge
    assert sealed.max_age == 0 and sealed.discard is DiscardPolicy.NEW
    assert not sealed.allow_rollup_hdrs
    with pytest.raises(InvalidConfigError, match="unseal"):
        validate_stream_update(sealed, dataclasses.replace(sealed, sealed=False))
    assert validate_stream_update(sealed, sealed) == sealed


def test_mirror_may_be_removed_not_changed():
    mirror = validate_stream_config(StreamConfig(name="M", mirror=M))
    promoted = validate_stream_update(mirror, dataclasses.replace(mirror, mirror=None))
    assert promoted.mirror is None and promoted.subjects == ("M",)
    assert validate_stream_update(mirror, mirror) == mirror
    with pytest.raises(InvalidConfigError) as exc:
        validate_stream_update(mirror, dataclasses.replace(
            mirror, mirror=StreamSource(name="OTHER")))
    assert exc.value.err_code == 10055


def test_interest_limits_switch():
    interest = validate_stream_update(BASE, dataclasses.replace(BASE, retention="interest"))
    back = validate_stream_update(interest, dataclasses.replace(interest, retention="limits"))
    assert back.retention is RetentionPolicy.LIMITS
