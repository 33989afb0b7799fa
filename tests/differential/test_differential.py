"""nats.py and the JavaScript client (``@nats-io/*`` 3.4, pinned in ``package.json``) run the
same scenarios against the gateway; what a user observes of each must equal the client's
golden, nats-server's observations (``goldens/``). Another test per client runs nats-server
now and checks the golden still holds, so a stale golden or a changed nats-server or client
shows as that test failing: ``make goldens`` writes them again."""

from __future__ import annotations

import pytest

from benchmarks.natsbase import NatsServer
from tests.cluster.conftest import drop_new_streams, js  # noqa: F401
from tests.differential.clients import CLIENTS, differences
from tests.gateway.test_gateway_server import gateway  # noqa: F401

REGENERATE = "regenerate with `make goldens` (python -m tests.differential.regenerate)"

# Differences from nats-server not removed yet, as differences() prints them: any other
# difference fails, and so does one of these gone (then delete it here).
KNOWN = {
    # an ephemeral's config carries the name the gateway chose; nats-server's has none
    ("natspy", "ordered"): ["config.name: '<chosen by the server>' != '<absent>'"],
}


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_nats_server_still_observes_the_golden(client):
    golden = client.load_golden()
    client.ready()
    with NatsServer() as server:
        live = client.observe(server.url, client.scenarios)
    assert live == golden["observed"], (
        f"nats-server != golden (made with {golden['made_with']}): {REGENERATE}\n"
        + "\n".join(differences(live, golden["observed"])))


@pytest.mark.parametrize("client,scenario",
                         [(c, s) for c in CLIENTS for s in c.scenarios],
                         ids=lambda v: getattr(v, "name", v))
def test_the_gateway_observes_what_nats_server_does(
        gateway, drop_new_streams, client, scenario):  # noqa: F811
    expected = client.load_golden()["observed"][scenario]
    assert "failed" not in expected, expected  # the scenario itself works on nats-server
    client.ready()
    gw = gateway()
    got = client.observe(f"nats://127.0.0.1:{gw.port}", [scenario])[scenario]
    assert differences(got, expected) == KNOWN.get((client.name, scenario), [])


ACCOUNTS = """
accounts {
  A: { jetstream: enabled, users: [ {user: a, password: a} ] }
  B: { jetstream: enabled, users: [ {user: b, password: b} ] }
}
"""
IN_ACCOUNTS = ("fetch", "kv", "obj", "errors")


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_two_accounts_each_observe_what_nats_server_does(
        gateway, drop_new_streams, client, tmp_path):  # noqa: F811
    """The same scenarios in two accounts of one gateway, one after the other, making the
    same stream and bucket names in each: every account observes nats-server's answers."""
    conf = tmp_path / "server.conf"
    conf.write_text(ACCOUNTS)
    client.ready()
    gw = gateway(config=str(conf))
    golden = client.load_golden()["observed"]
    for user in ("a", "b"):
        got = client.observe(f"nats://127.0.0.1:{gw.port}", IN_ACCOUNTS, user, user)
        for scenario in IN_ACCOUNTS:
            assert differences(got[scenario], golden[scenario]) == KNOWN.get(
                (client.name, scenario), []), (user, scenario)
