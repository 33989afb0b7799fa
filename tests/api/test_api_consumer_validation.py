import dataclasses
from datetime import UTC, datetime

import pytest

from rayjet.api import (
    CONSUMER_EDITABLE,
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    PriorityPolicy,
    StreamConfig,
    StreamConsumerLimits,
    consumer_defaults,
    validate_consumer_config,
    validate_consumer_update,
    validate_stream_config,
)
from rayjet.errors import InvalidConfigError

T0 = datetime(2024, 1, 1, tzinfo=UTC)
STREAM = validate_stream_config(StreamConfig(name="ORDERS", subjects=["ORDERS.*"],
                                             num_replicas=3))
WQ = validate_stream_config(StreamConfig(name="JOBS", subjects=["jobs.>"],
                                         retention="workqueue", num_replicas=3))
INTEREST = dataclasses.replace(STREAM, retention="interest")
LIMITED = dataclasses.replace(STREAM, consumer_limits=StreamConsumerLimits(
    inactive_threshold=60.0, max_ack_pending=100))


def test_pull_defaults():
    cfg = validate_consumer_config(ConsumerConfig(durable_name="D"), STREAM)
    assert cfg.ack_policy is AckPolicy.EXPLICIT
    assert cfg.ack_wait == 30.0
    assert cfg.max_ack_pending == 1000
    assert cfg.max_deliver == -1
    assert cfg.max_waiting == 512
    assert cfg.deliver_policy is DeliverPolicy.ALL
    assert cfg.num_replicas == 0  # inherits the stream's


def test_push_and_ack_none_defaults():
    push = consumer_defaults(ConsumerConfig(deliver_subject="out", ack_policy="none"))
    assert push.max_waiting == 0 and push.ack_wait is None and push.max_ack_pending is None
    assert consumer_defaults(ConsumerConfig(ack_policy="all")).ack_wait == 30.0


def test_ack_none_leaves_max_ack_pending_unset():
    """nats-server 2.15.1 leaves max_ack_pending out of an ack-none consumer's config (nats-py
    reads None), keeps an explicit -1 or pull limit, and defaults ack all/explicit to 1000."""
    for cfg in (ConsumerConfig(durable_name="P", ack_policy="none"),
                ConsumerConfig(durable_name="Z", ack_policy="none", max_ack_pending=0),
                ConsumerConfig(durable_name="Q", ack_policy="none", deliver_subject="out")):
        done = validate_consumer_config(cfg, STREAM)
        assert done.max_ack_pending is None
        assert "max_ack_pending" not in done.to_dict()
        assert ConsumerConfig.from_dict(done.to_dict()) == done
    for kw, want in ((dict(max_ack_pending=-1), -1), (dict(max_ack_pending=5), 5)):
        done = validate_consumer_config(ConsumerConfig(durable_name="P", ack_policy="none", **kw),
                                        STREAM)
        assert done.to_dict()["max_ack_pending"] == want
    assert validate_consumer_config(ConsumerConfig(durable_name="A", ack_policy="all"),
                                    STREAM).to_dict()["max_ack_pending"] == 1000


def test_defaults_from_backoff_and_stream_limits():
    cfg = consumer_defaults(ConsumerConfig(backoff=[2, 4], max_deliver=0))
    assert cfg.ack_wait == 2.0 and cfg.max_deliver == -1
    limited = consumer_defaults(ConsumerConfig(), LIMITED)
    assert limited.max_ack_pending == 100 and limited.inactive_threshold == 60.0
    pinned = consumer_defaults(ConsumerConfig(priority_policy="pinned_client",
                                              priority_groups=["g"]))
    assert pinned.priority_timeout == 120.0
    assert ConsumerConfig().with_defaults(STREAM) == consumer_defaults(ConsumerConfig(), STREAM)


def test_valid_consumers_pass():
    for cfg, stream in (
        (ConsumerConfig(durable_name="D", filter_subject="ORDERS.new"), STREAM),
        (ConsumerConfig(name="E", deliver_subject="push.E", idle_heartbeat=0.1,
                        flow_control=True, rate_limit_bps=100), STREAM),
        (ConsumerConfig(durable_name="D", name="D", deliver_policy="by_start_sequence",
                        opt_start_seq=5), STREAM),
        (ConsumerConfig(deliver_policy="by_start_time", opt_start_time=T0), STREAM),
        (ConsumerConfig(deliver_policy="last_per_subject", filter_subjects=["a", "b"]), STREAM),
        (ConsumerConfig(filter_subjects=["a.*.c", "a.b.*"]), STREAM),  # collide, no subset
        (ConsumerConfig(backoff=[1, 2, 3], max_deliver=3, sample_freq="100%"), STREAM),
        (ConsumerConfig(filter_subject="OTHER.x"), STREAM),  # allowed since NATS 2.10
        (ConsumerConfig(priority_policy="overflow", priority_groups=["jobs-1"]), STREAM),
        (ConsumerConfig(num_replicas=3), INTEREST),
        (ConsumerConfig(durable_name="W"), WQ),
        (ConsumerConfig(max_ack_pending=100, inactive_threshold=60), LIMITED),
        (ConsumerConfig(durable_name="x" * 255), None),
    ):
        assert validate_consumer_config(cfg, stream).durable_name == cfg.durable_name


C = ConsumerConfig
PUSH = dict(deliver_subject="push.x")
BAD = [
    # names
    (C(durable_name="a/b"), STREAM, 10127),
    (C(name="a\\b"), STREAM, 10127),
    (C(durable_name="x" * 256), STREAM, 10102),
    (C(durable_name="a.b"), STREAM, 10103),
    (C(name="a b"), STREAM, 10103),
    (C(durable_name="a*"), STREAM, 10103),
    (C(durable_name="A", name="B"), STREAM, 10132),
    # replicas
    (C(num_replicas=5), STREAM, 10126),
    (C(num_replicas=-1), STREAM, 10133),
    (C(num_replicas=1), INTEREST, 10134),
    (C(num_replicas=1), WQ, 10134),
    # ack wait / backoff
    (C(backoff=[1, -1]), STREAM, 10184),
    (C(ack_wait=-1), STREAM, 10183),
    (C(backoff=[1, 2, 3], max_deliver=2), STREAM, 10116),
    (C(description="d" * 4097), STREAM, 10107),
    # push
    (C(deliver_subject="out.*"), STREAM, 10079),
    (C(deliver_subject="out..x"), STREAM, 10112),
    (C(deliver_subject="ORDERS.new"), STREAM, 10081),
    (C(max_waiting=10, **PUSH), STREAM, 10080),
    (C(ack_policy="none", max_ack_pending=5, **PUSH), STREAM, 10082),
    (C(idle_heartbeat=0.05, **PUSH), STREAM, 10083),
    (C(flow_control=True, **PUSH), STREAM, 10108),
    # pull
    (C(ack_policy="none"), WQ, 10084),
    (C(rate_limit_bps=100), STREAM, 10086),
    (C(max_waiting=-1), STREAM, 10087),
    (C(idle_heartbeat=1), STREAM, 10088),
    (C(flow_control=True), STREAM, 10089),
    (C(max_request_batch=-1), STREAM, 10114),
    (C(max_request_expires=0.0005), STREAM, 10115),
    # stream consumer limits
    (C(max_ack_pending=101), LIMITED, 10121),
    (C(inactive_threshold=61), LIMITED, 10153),
    # filters
    (C(filter_subject="a", filter_subjects=["b"]), STREAM, 10136),
    (C(filter_subjects=["a", ""]), STREAM, 10139),
    (C(filter_subject="a..b"), STREAM, 10052),
    (C(filter_subjects=["a.>", "a.b"]), STREAM, 10138),
    (C(filter_subjects=["a.b", "a.b"]), STREAM, 10138),
    # deliver policy and start position
    (C(opt_start_seq=5), STREAM, 10094),
    (C(opt_start_time=T0), STREAM, 10094),
    (C(deliver_policy="last", opt_start_seq=1), STREAM, 10094),
    (C(deliver_policy="new", opt_start_time=T0), STREAM, 10094),
    (C(deliver_policy="last_per_subject"), STREAM, 10094),
    (C(deliver_policy="by_start_sequence"), STREAM, 10094),
    (C(deliver_policy="by_start_sequence", opt_start_seq=1, opt_start_time=T0), STREAM, 10094),
    (C(deliver_policy="by_start_time"), STREAM, 10094),
    (C(deliver_policy="by_start_time", opt_start_time=T0, opt_start_seq=3), STREAM, 10094),
    # misc
    (C(sample_freq="often"), STREAM, 10095),
    (C(metadata={"k": "v" * (128 * 1024)}), STREAM, 10135),
    # priority groups
    (C(priority_policy="overflow", priority_groups=["g"], **PUSH), STREAM, 10178),
    (C(priority_policy="overflow"), STREAM, 10159),
    (C(priority_policy="overflow", priority_groups=[""]), STREAM, 10161),
    (C(priority_policy="overflow", priority_groups=["x" * 17]), STREAM, 10162),
    (C(priority_policy="overflow", priority_groups=["a b"]), STREAM, 10162),
    (C(priority_groups=["g"]), STREAM, 10196),
    (C(priority_timeout=5), STREAM, 10197),
    # work queue
    (C(ack_policy="all"), WQ, 10098),
    (C(ack_policy="none", **PUSH), WQ, 10098),
    (C(deliver_policy="new"), WQ, 10101),
]


@pytest.mark.parametrize("cfg, stream, err_code", BAD,
                         ids=[f"{i}-{e}" for i, (_, _, e) in enumerate(BAD)])
def test_invalid_consumer_configs(cfg, stream, err_code):
    with pytest.raises(InvalidConfigError) as exc:
        validate_consumer_config(cfg, stream)
    assert exc.value.err_code == err_code, str(exc.value)
    assert str(exc.value)  # a sentence


def test_not_a_config():
    with pytest.raises(InvalidConfigError) as exc:
        validate_consumer_config(None, STREAM)  # type: ignore[arg-type]
    assert exc.value.err_code == 10078


def test_strict_filters_reports_10093():
    cfg = ConsumerConfig(filter_subject="OTHER.x")
    with pytest.raises(InvalidConfigError) as exc:
        validate_consumer_config(cfg, STREAM, strict_filters=True)
    assert exc.value.err_code == 10093
    assert validate_consumer_config(ConsumerConfig(filter_subject="ORDERS.x"), STREAM,
                                    strict_filters=True)


def test_work_queue_uniqueness():
    a = ConsumerConfig(durable_name="A", filter_subject="jobs.a.>")
    unfiltered = ConsumerConfig(durable_name="U")
    assert validate_consumer_config(unfiltered, WQ, existing=[])
    assert validate_consumer_config(ConsumerConfig(durable_name="B", filter_subject="jobs.b"),
                                    WQ, existing=[a])
    # the same consumer being re-created does not clash with itself
    assert validate_consumer_config(a, WQ, existing=[a])
    for cfg, existing, code in (
        (unfiltered, [a], 10099),
        (ConsumerConfig(durable_name="B", filter_subject="jobs.*.x"), [a], 10100),
        (ConsumerConfig(durable_name="B", filter_subject="jobs.b"), [unfiltered], 10100),
    ):
        with pytest.raises(InvalidConfigError) as exc:
            validate_consumer_config(cfg, WQ, existing=existing)
        assert exc.value.err_code == code


# -- updates --------------------------------------------------------------------------------
OLD = validate_consumer_config(ConsumerConfig(durable_name="D", filter_subject="ORDERS.a"),
                               STREAM)
OLD_PUSH = validate_consumer_config(ConsumerConfig(durable_name="P", deliver_subject="push.p",
                                                   idle_heartbeat=1, flow_control=True), STREAM)


@pytest.mark.parametrize("changes", [
    dict(ack_wait=5), dict(max_deliver=3), dict(backoff=[1, 2]), dict(filter_subject="ORDERS.b"),
    dict(filter_subject=None, filter_subjects=["ORDERS.a", "ORDERS.b"]),
    dict(max_ack_pending=5), dict(description="x"), dict(metadata={"a": "b"}),
    dict(sample_freq="10"), dict(headers_only=True), dict(inactive_threshold=30),
    dict(max_request_batch=10), dict(max_request_expires=5), dict(max_request_max_bytes=10),
    dict(num_replicas=3), dict(pause_until=T0),
], ids=lambda c: next(iter(c)))
def test_editable_consumer_fields(changes):
    assert validate_consumer_update(OLD, dataclasses.replace(OLD, **changes), STREAM)


def test_push_fields_editable():
    new = dataclasses.replace(OLD_PUSH, deliver_subject="push.q", rate_limit_bps=10,
                              deliver_group="g")
    assert validate_consumer_update(OLD_PUSH, new, STREAM).deliver_subject == "push.q"


@pytest.mark.parametrize("old, changes, fragment", [
    (OLD, dict(deliver_policy="new"), "deliver policy"),
    (OLD, dict(ack_policy="all"), "ack policy"),
    (OLD, dict(replay_policy="original"), "replay policy"),
    (OLD, dict(mem_storage=True), "mem storage"),
    (OLD, dict(max_waiting=10), "max waiting"),
    (OLD, dict(durable_name="E", name="E"), "name"),
    (OLD, dict(deliver_subject="push.d", max_waiting=0), "push based"),
    (OLD_PUSH, dict(idle_heartbeat=2), "idle heartbeat"),
    (OLD_PUSH, dict(deliver_subject=None, idle_heartbeat=None, flow_control=False),
     "pull based"),
    (OLD_PUSH, dict(flow_control=False), "flow control"),
])
def test_fixed_consumer_fields(old, changes, fragment):
    with pytest.raises(InvalidConfigError) as exc:
        validate_consumer_update(old, dataclasses.replace(old, **changes), STREAM)
    assert exc.value.err_code == 10012
    assert fragment in str(exc.value)


def test_start_position_fixed():
    old = validate_consumer_config(ConsumerConfig(
        durable_name="S", deliver_policy="by_start_sequence", opt_start_seq=5), STREAM)
    with pytest.raises(InvalidConfigError, match="opt start seq"):
        validate_consumer_update(old, dataclasses.replace(old, opt_start_seq=6), STREAM)


def test_update_rules_still_apply():
    with pytest.raises(InvalidConfigError) as exc:
        validate_consumer_update(OLD, dataclasses.replace(OLD, backoff=[1, 2], max_deliver=1))
    assert exc.value.err_code == 10116


def test_editable_table():
    assert set(CONSUMER_EDITABLE) == set(ConsumerConfig.__dataclass_fields__)
    assert not CONSUMER_EDITABLE["ack_policy"] and CONSUMER_EDITABLE["ack_wait"]
    assert CONSUMER_EDITABLE["filter_subjects"] and not CONSUMER_EDITABLE["deliver_policy"]


def test_pull_switch_error_precedes_field_checks():
    pull = validate_consumer_config(ConsumerConfig(durable_name="X"), STREAM)
    assert pull.priority_policy is PriorityPolicy.NONE
