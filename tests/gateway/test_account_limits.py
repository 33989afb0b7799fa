"""Account limits and a JetStream domain, from Python and through nats.py: limits are set
once for the cluster, checked as nats-server checks an account's, and reported in account
info with the gateway's request counts; a domain's API prefix answers like $JS.API."""

from __future__ import annotations

import asyncio
import contextlib

import nats
import pytest
from nats.js.errors import BadRequestError as NatsBadRequest

from rayjet import AccountLimits, ConsumerConfig, StorageType
from rayjet.errors import APIError, BadRequestError, MaximumConsumersError
from rayjet.gateway import GatewayOptions
from tests.cluster.conftest import js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401


@pytest.fixture
def limits(js):  # noqa: F811
    def set_(**kw) -> AccountLimits:
        return js.set_account_limits(**kw)

    yield set_
    js.set_account_limits(AccountLimits())


def test_limits_from_python(js, stream_name, limits):  # noqa: F811
    assert js.account_limits() == AccountLimits()
    got = limits(max_streams=50, max_storage=10_000, storage_max_stream_bytes=4096)
    assert js.account_limits() == got == AccountLimits(max_streams=50, max_storage=10_000,
                                                       storage_max_stream_bytes=4096)
    try:
        with pytest.raises(APIError) as err:
            js.add_stream(name=stream_name, max_bytes=8192)
        assert err.value.err_code == 10122
        js.add_stream(name=stream_name, max_bytes=4096, num_replicas=1)
        with pytest.raises(APIError) as err:
            js.add_stream(name=stream_name + "B", max_bytes=4096, num_replicas=3)
        assert err.value.err_code == 10047  # 4,096 + 3 x 4,096 reserved > 10,000
        info = js.account_info()
        assert info["reserved_storage"] >= 4096 and info["limits"] == got
        js.add_stream(name=stream_name + "M", storage=StorageType.MEMORY, max_bytes=1 << 20)
    finally:
        for name in (stream_name, stream_name + "M"):
            with contextlib.suppress(APIError):
                js.delete_stream(name)
    with pytest.raises(BadRequestError):
        js.set_account_limits(max_consumers=-5)
    assert js.account_limits() == got  # a refused change leaves the limits as they were


def test_limits_and_a_domain_through_nats_py(js, gateway, stream_name, limits):  # noqa: F811
    gw = gateway(domain="acct")
    limits(max_bytes_required=True, storage_max_stream_bytes=4096, max_ack_pending=50)

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        try:
            assert nc._server_info.get("domain") == "acct"
            jsc = nc.jetstream()
            with pytest.raises(NatsBadRequest) as err:
                await jsc.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            assert err.value.err_code == 10113
            await jsc.add_stream(name=stream_name, subjects=[f"{stream_name}.>"],
                                 max_bytes=4096)
            await jsc.publish(f"{stream_name}.a", b"x" * 10)
            info = await jsc.account_info()
            assert (info.api.total, info.api.errors) == (2, 1)
            assert info.domain == "acct" and info.streams >= 1 and info.storage >= 46
            assert info.limits.max_bytes_required and info.limits.max_ack_pending == 50
            assert info.limits.storage_max_stream_bytes == 4096
            # the domain's prefix reaches the same JetStream
            in_domain = nc.jetstream(domain="acct")
            assert (await in_domain.stream_info(stream_name)).state.messages == 1
            ci = await in_domain.add_consumer(stream_name, durable_name="c")
            assert ci.config.max_ack_pending == 50  # filled in from the account's cap
            sub = await in_domain.pull_subscribe(f"{stream_name}.a", "c", stream=stream_name)
            (msg,) = await sub.fetch(1, timeout=5)
            assert msg.data == b"x" * 10
            again = await jsc.account_info()
            # account info, stream info, consumer create, and the consumer info pull_subscribe asks
            assert again.api.total == info.api.total + 4
        finally:
            await nc.close()

    try:
        asyncio.run(run())
    finally:
        with contextlib.suppress(APIError):
            js.delete_stream(stream_name)


@pytest.mark.parametrize("bad", ["", "a.b", "a b", "*", ">"])
def test_a_domain_is_one_subject_token(bad):
    with pytest.raises(BadRequestError):
        GatewayOptions(domain=bad)


def test_consumers_the_stream_leader_runs_are_held_to_the_limits(js, stream_name,  # noqa: F811
                                                                   limits):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    try:
        # the account is this test session's: earlier tests' durables count, and their
        # ephemerals would vanish under the test, so those go first
        for name in js.stream_names():
            for info in js.consumers_info(name):
                if not info.config.durable_name:
                    with contextlib.suppress(APIError):
                        js.delete_consumer(name, info.name)
        before = js.account_info()["consumers"]
        limits(max_ack_pending=30, max_consumers=before + 2)
        ephemeral = js.add_consumer(stream_name, ConsumerConfig())  # run by the stream leader
        assert ephemeral.config.max_ack_pending == 30
        with pytest.raises(APIError) as err:
            js.add_consumer(stream_name, ConsumerConfig(max_ack_pending=31))
        assert err.value.err_code == 10121
        js.add_consumer(stream_name, ConsumerConfig(durable_name="d"))  # in the catalogue
        with pytest.raises(MaximumConsumersError):
            js.add_consumer(stream_name, ConsumerConfig())
        with pytest.raises(MaximumConsumersError):
            js.add_consumer(stream_name, ConsumerConfig(durable_name="e"))
    finally:
        js.delete_stream(stream_name)
