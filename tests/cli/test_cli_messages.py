"""`rayjet pub|req|sub`, `stream view|get|rmm|purge` and `consumer ...` (seed walkthroughs)."""

from __future__ import annotations

import pytest

from rayjet import StorageType


@pytest.fixture(scope="module")
def orders(js):
    """One stream for the message tests: ORDERSCLI on ORDERSCLI.*."""
    js.add_stream(name="ORDERSCLI", subjects=["ORDERSCLI.*"], storage=StorageType.MEMORY)
    yield "ORDERSCLI"
    js.delete_stream("ORDERSCLI")


def test_dedup_with_req_then_view_get_rmm_purge(cli, orders):
    # seed 001: four requests with the same Nats-Msg-Id store one message
    first = cli.json("req", "-H", "Nats-Msg-Id:1", "ORDERSCLI.new", "hello1")
    assert first == {"stream": orders, "seq": first["seq"]}
    again = cli("req", "-H", "Nats-Msg-Id:1", "ORDERSCLI.new", "hello2").stdout
    assert '"duplicate":true' in again and "Received with rtt" in again
    acks = cli.json("pub", "ORDERSCLI.batch", "order {{Count}}", "--count", "3")
    assert acks["published"] == 3 and not acks["errors"]
    seqs = [a["seq"] for a in acks["acks"]]
    assert seqs == [first["seq"] + 1, first["seq"] + 2, first["seq"] + 3]
    assert "Published 7 bytes to ORDERSCLI.batch" in cli("pub", "ORDERSCLI.batch", "order 4").stdout

    shown = cli.json("stream", "view", orders, "--subject", "ORDERSCLI.batch")
    assert [m["data"] for m in shown] == ["order 1", "order 2", "order 3", "order 4"]
    view = cli("stream", "view", orders, "--count", "1").stdout
    assert "hello1" in view and "Nats-Msg-Id: 1" in view and "order 1" not in view
    got = cli.json("stream", "get", orders, first["seq"])
    assert got["data"] == "hello1" and got["headers"] == {"Nats-Msg-Id": "1"}
    last = cli.json("stream", "get", orders, "--last-for", "ORDERSCLI.batch")
    assert last["data"] == "order 4"
    assert cli("stream", "get", orders, seqs[0], "--raw").stdout == "order 1\n"

    assert cli.json("stream", "rmm", orders, seqs[0], "-f")["deleted"]
    assert cli.json("stream", "get", orders, seqs[0], code=1)["error"]["err_code"] == 10037
    assert cli.json("stream", "purge", orders, "--keep", "1", "-f")["purged"] == 3
    assert cli.json("stream", "info", orders)["state"]["messages"] == 1
    cli("pub", "NOSTREAM.x", "hi", code=1)  # no stream captures the subject
    cli("pub", "ORDERSCLI.x", "hi", "-H", "nocolon", code=2)


def test_consumer_walkthrough(cli, orders):
    """Seed 001's consumer walkthrough: next acks, --no-ack leaves it pending, redelivery."""
    created = cli("consumer", "add", orders, "DISPATCH", "--filter", "ORDERSCLI.processed",
                  "--ack", "explicit", "--deliver", "all", "--pull", "--wait", "1s").stdout
    assert "DISPATCH was created" in created and "Pull Mode: true" in created
    cli("pub", "ORDERSCLI.processed", "order 4")
    out = cli("consumer", "next", orders, "DISPATCH").stdout
    assert "order 4" in out and "Acknowledged message" in out
    info = cli.json("consumer", "info", orders, "DISPATCH")
    assert info["ack_floor"]["stream_seq"] == info["delivered"]["stream_seq"]

    cli("pub", "ORDERSCLI.processed", "order 5")
    (msg,) = cli.lines("consumer", "next", orders, "DISPATCH", "--no-ack")
    assert msg["data"] == "order 5" and not msg["acked"]
    info = cli.json("consumer", "info", orders, "DISPATCH")
    assert info["num_ack_pending"] == 1
    human = cli("consumer", "info", orders, "DISPATCH").stdout
    assert "Last Delivered Message: Consumer sequence: 2" in human
    # after the 1 s ack wait it comes again, delivered twice, and is acked this time
    (again,) = cli.lines("consumer", "next", orders, "DISPATCH", "--wait", "5")
    assert again["data"] == "order 5" and again["delivered"] == 2 and again["acked"]
    info = cli.json("consumer", "info", orders, "DISPATCH")
    assert info["num_ack_pending"] == 0 and info["num_redelivered"] == 0

    assert cli.json("consumer", "ls", orders, "--names") == ["DISPATCH"]
    assert cli.json("consumer", "ls", orders)[0]["name"] == "DISPATCH"
    assert "DISPATCH" in cli("consumer", "ls", orders).stdout
    cli("pub", "ORDERSCLI.processed", "order {{Count}}", "--count", "2")
    subbed = cli.lines("consumer", "sub", orders, "DISPATCH", "--count", "2")
    assert [m["data"] for m in subbed] == ["order 1", "order 2"]
    nothing = cli.json("consumer", "next", orders, "DISPATCH", "--wait", "0.2", code=1)
    assert nothing["error"]["err_code"] is not None
    cli("consumer", "rm", orders, "DISPATCH", "-f")
    assert cli.json("consumer", "info", orders, "DISPATCH", code=1)["error"]["err_code"] == 10014


def test_consumer_bad_flags_and_missing_things(cli, orders):
    cli("consumer", "add", orders, code=2)  # no name and not --ephemeral
    cli("consumer", "add", orders, "X", "--ack", "maybe", code=2)
    cli("consumer", "add", orders, "X", "--pull", "--target", "out.x", code=2)
    cli("consumer", "next", orders, "X", "--count", "0", code=2)
    assert "err_code=10014" in cli("consumer", "next", orders, "NOSUCH", code=1).output
    assert "err_code=10059" in cli("consumer", "ls", "NOSUCHSTREAM", code=1).output


def test_sub_tails_through_an_ordered_consumer(cli, orders):
    cli("pub", "ORDERSCLI.tail", "t{{Count}}", "--count", "3")
    got = cli.lines("sub", "ORDERSCLI.tail", "--all", "--count", "3")
    assert [m["data"] for m in got] == ["t1", "t2", "t3"]
    assert all(m["stream"] == orders for m in got)
    cli("sub", code=2)
    cli("sub", "ORDERSCLI.tail", "--all", "--last", code=2)
