"""Account limits in the catalogue: replicated as an op, kept in snapshots, and checked as
nats-server checks an account's JetStream limits on what is created or changed."""

import dataclasses

import msgpack
import pytest

from rayjet.api.account import NO_LIMITS, AccountLimits
from rayjet.api.consumer import ConsumerConfig
from rayjet.api.enums import AckPolicy, StorageType
from rayjet.errors import APIError, BadRequestError, MaximumConsumersError
from rayjet.meta import Catalogue
from tests.meta.test_catalogue import add, apply


def limited(**kw) -> Catalogue:
    cat = Catalogue()
    apply(cat, cat.prepare_set_limits(AccountLimits(**kw)))
    return cat


def refused(call, err_code: int) -> APIError:
    with pytest.raises(APIError) as err:
        call()
    assert err.value.err_code == err_code, err.value
    return err.value


def test_max_bytes_required_and_the_per_stream_caps():
    cat = limited(max_bytes_required=True, storage_max_stream_bytes=4096,
                  memory_max_stream_bytes=2048)
    err = refused(lambda: add(cat, "L", ["l"]), 10113)
    assert err.description == "account requires a stream config to have max bytes set"
    err = refused(lambda: add(cat, "L", ["l"], max_bytes=65536), 10122)
    assert err.description == "stream max bytes exceeds account limit max stream bytes"
    refused(lambda: add(cat, "M", ["m"], max_bytes=4096, storage=StorageType.MEMORY), 10122)
    assert add(cat, "L", ["l"], max_bytes=4096).config.max_bytes == 4096
    assert add(cat, "M", ["m"], max_bytes=2048, storage=StorageType.MEMORY)
    # an update is held to the same rules
    big = dataclasses.replace(cat.stream("L").config, max_bytes=8192)
    refused(lambda: cat.prepare_update_stream(big), 10122)
    unset = dataclasses.replace(cat.stream("L").config, max_bytes=-1)
    refused(lambda: cat.prepare_update_stream(unset), 10113)


def test_reservations_count_replicas_per_storage_type():
    cat = limited(max_storage=10_000, max_memory=1_000)
    add(cat, "A", ["a"], replicas=3, max_bytes=3_000)          # reserves 9,000
    err = refused(lambda: add(cat, "B", ["b"], max_bytes=1_001), 10047)
    assert err.description == "insufficient storage resources available"
    add(cat, "B", ["b"], max_bytes=1_000)                        # exactly the rest
    add(cat, "C", ["c"])                                         # no max_bytes: no reservation
    refused(lambda: add(cat, "M", ["m"], max_bytes=2_000, storage=StorageType.MEMORY), 10028)
    add(cat, "M", ["m"], max_bytes=1_000, storage=StorageType.MEMORY)
    # a stream's own reservation is not counted twice when it changes
    grown = dataclasses.replace(cat.stream("B").config, max_bytes=1_000)
    assert cat.prepare_update_stream(grown)
    apply(cat, cat.prepare_delete_stream("A"))
    add(cat, "D", ["d"], replicas=3, max_bytes=3_000)


def test_stream_and_consumer_counts():
    cat = limited(max_streams=2, max_consumers=3)
    add(cat, "A", ["a"])
    add(cat, "B", ["b"])
    refused(lambda: add(cat, "C", ["c"]), 10027)
    for stream, name in (("A", "x"), ("A", "y"), ("B", "z")):
        apply(cat, cat.prepare_add_consumer(stream, ConsumerConfig(durable_name=name),
                                            now_ns=1))
    with pytest.raises(MaximumConsumersError) as err:
        cat.prepare_add_consumer("B", ConsumerConfig(durable_name="w"), now_ns=1)
    assert err.value.err_code == 10026
    # the ephemeral consumers a stream leader runs count too
    apply(cat, cat.prepare_delete_consumer("B", "z"))
    with pytest.raises(MaximumConsumersError):
        cat.prepare_add_consumer("B", ConsumerConfig(durable_name="w"), now_ns=1, elsewhere=1)
    # changing an existing consumer is not a new one
    same = cat.prepare_add_consumer("A", ConsumerConfig(durable_name="x", description="d"),
                                    now_ns=1)
    assert same.config["description"] == "d"


def test_max_ack_pending_is_filled_in_and_capped():
    cat = limited(max_ack_pending=100)
    add(cat, "A", ["a"])
    ca = apply(cat, cat.prepare_add_consumer("A", ConsumerConfig(durable_name="d"), now_ns=1))
    assert ca.config.max_ack_pending == 100
    small = apply(cat, cat.prepare_add_consumer(
        "A", ConsumerConfig(durable_name="s", max_ack_pending=10), now_ns=1))
    assert small.config.max_ack_pending == 10
    err = refused(lambda: cat.prepare_add_consumer(
        "A", ConsumerConfig(durable_name="b", max_ack_pending=101), now_ns=1), 10121)
    assert err.description == "consumer max ack pending exceeds system limit of 100"
    none = apply(cat, cat.prepare_add_consumer(
        "A", ConsumerConfig(durable_name="n", ack_policy=AckPolicy.NONE), now_ns=1))
    assert none.config.ack_policy == AckPolicy.NONE


def test_limits_survive_a_snapshot_and_older_snapshots_have_none():
    cat = limited(max_streams=5, max_bytes_required=True)
    add(cat, "A", ["a"], max_bytes=10)
    copy = Catalogue()
    copy.restore(cat.snapshot())
    assert copy.limits == AccountLimits(max_streams=5, max_bytes_required=True)
    version, applied, rows, _ = msgpack.unpackb(cat.snapshot(), raw=False)
    legacy = Catalogue()
    legacy.restore(msgpack.packb([version, applied, rows], use_bin_type=True))
    assert legacy.limits == NO_LIMITS and legacy.stream("A")


@pytest.mark.parametrize("bad", [{"max_streams": -2}, {"max_memory": 1.5},
                                 {"max_bytes_required": 1}, {"max_consumers": True}])
def test_bad_limits_are_refused(bad):
    with pytest.raises(BadRequestError):
        AccountLimits(**bad)


def test_without_limits_nothing_is_required():
    cat = Catalogue()
    assert cat.limits == NO_LIMITS
    assert add(cat, "A", ["a"]).config.max_bytes == -1
    ca = apply(cat, cat.prepare_add_consumer("A", ConsumerConfig(durable_name="d"), now_ns=1))
    assert ca.config.max_ack_pending == 1000


def test_creating_a_capped_consumer_again_is_the_same_consumer():
    cat = limited(max_ack_pending=100)
    add(cat, "A", ["a"])
    ca = apply(cat, cat.prepare_add_consumer("A", ConsumerConfig(durable_name="d"), now_ns=1))
    assert cat.prepare_add_consumer("A", ConsumerConfig(durable_name="d"), now_ns=2) is ca
