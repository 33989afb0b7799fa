"""`rayjet account info` and `rayjet account limits`."""

from __future__ import annotations

import pytest

from rayjet import AccountLimits


@pytest.fixture
def lifted(js):
    yield
    js.set_account_limits(AccountLimits())


def test_limits_set_shown_and_lifted(cli, js, stream_name, lifted):
    assert cli.json("account", "limits") == AccountLimits().to_dict()
    now = cli.json("account", "limits", "--max-streams", "50", "--max-storage", "1GB",
                   "--storage-max-stream-bytes", "64KB", "--max-bytes-required")
    assert (now["max_streams"], now["max_storage"], now["storage_max_stream_bytes"],
            now["max_bytes_required"]) == (50, 1 << 30, 64 << 10, True)
    assert js.account_limits().max_streams == 50
    # only what is given changes
    assert cli.json("account", "limits", "--max-consumers", "7")["max_streams"] == 50
    cli("stream", "add", stream_name, "--subjects", f"{stream_name}.>", "--defaults", code=1)
    cli("stream", "add", stream_name, "--subjects", f"{stream_name}.>", "--max-bytes", "1KB",
        "--defaults")
    info = cli.json("account", "info")
    assert info["streams"] >= 1 and info["reserved_storage"] >= 1024
    assert info["limits"]["max_consumers"] == 7
    table = cli("account", "info").stdout
    assert "Max Streams" in table and "50" in table
    cli("account", "limits", "--max-streams", "lots", code=2)
    cli("account", "limits", "--clear", "--max-streams", "3", code=2)
    assert cli.json("account", "limits", "--clear") == AccountLimits().to_dict()
    cli("stream", "rm", stream_name, "-f")


def test_a_gateway_domain_is_checked_before_anything_starts(cli):
    out = cli("gateway", "--domain", "a.b", code=2).output
    assert "one subject token" in out
    cli("server", "start", "--gateway-domain", "*", code=2)
