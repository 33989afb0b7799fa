"""The handshake over real sockets, and where the cluster secret comes from."""

from __future__ import annotations

import asyncio

import msgpack
import pytest

from rayjet.dataplane.auth import (
    AuthError,
    client_handshake,
    client_proof,
    cluster_secret,
    server_handshake,
    server_proof,
)
from rayjet.dataplane.frames import Kind, pack_frame, read_frame
from tests.dataplane.helpers import SECRET, run


async def _pair(server_secret: bytes, client_secret: bytes, *, client_id: str = "client-1"):
    """Run both sides of one handshake; each side's result or exception."""
    outcome = {}

    async def serve(reader, writer):
        try:
            outcome["server"] = await server_handshake(reader, writer, secret=server_secret,
                                                       process_id="server-1", timeout=2)
        except Exception as exc:  # noqa: BLE001 - recorded for the test to check
            outcome["server"] = exc
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        outcome["client"] = await client_handshake(reader, writer, secret=client_secret,
                                                   process_id=client_id, timeout=2)
    except Exception as exc:  # noqa: BLE001
        outcome["client"] = exc
    writer.close()
    async with asyncio.timeout(3):
        while "server" not in outcome:
            await asyncio.sleep(0.005)
    server.close()
    await server.wait_closed()
    return outcome["server"], outcome["client"]


async def _handshaking_server(result: dict):
    """A server that runs the handshake on each connection; its AuthError goes to
    ``result["server"]``."""
    async def serve(reader, writer):
        try:
            await server_handshake(reader, writer, secret=SECRET, process_id="s", timeout=2)
        except AuthError as exc:
            result["server"] = exc
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


def test_both_sides_learn_each_other():
    assert run(_pair(SECRET, SECRET)) == ("client-1", "server-1")


@pytest.mark.parametrize("server_secret, client_secret", [(SECRET, b"other"),
                                                          (b"other", SECRET)])
def test_a_wrong_secret_fails_on_both_sides(server_secret, client_secret):
    server, client = run(_pair(server_secret, client_secret))
    assert isinstance(client, AuthError) and "does not know the cluster secret" in str(client)
    assert isinstance(server, AuthError) and "bad server proof" in str(server)


def test_the_server_checks_the_clients_proof():
    """A client that skips checking the server and guesses a proof is refused."""
    async def main():
        result = {}
        server = await _handshaking_server(result)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        nonce = b"n" * 32
        writer.write(pack_frame(Kind.HELLO, msgpack.packb([1, "intruder", nonce])))
        challenge = await read_frame(reader)
        assert challenge.kind == Kind.CHALLENGE
        server_nonce = challenge.payload[:32]
        writer.write(pack_frame(Kind.PROOF, client_proof(b"guess", server_nonce, nonce)))
        answer = await read_frame(reader)
        assert answer.kind == Kind.ERROR and await read_frame(reader) is None
        writer.close()
        server.close()
        await server.wait_closed()
        return result["server"]

    assert "does not know the cluster secret" in str(run(main()))


def test_proofs_are_bound_to_their_side_and_nonces():
    a, b = b"a" * 32, b"b" * 32
    assert server_proof(SECRET, a, b) != client_proof(SECRET, b, a)
    assert server_proof(SECRET, a, b) != server_proof(SECRET, b, a)
    assert server_proof(SECRET, a, b) != server_proof(b"x", a, b)


def test_version_mismatch_is_refused():
    async def main():
        result = {}
        server = await _handshaking_server(result)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        writer.write(pack_frame(Kind.HELLO, msgpack.packb([99, "future", b"n" * 32])))
        answer = await read_frame(reader)
        assert answer == (Kind.ERROR, b"unsupported data-plane version 99")
        writer.close()
        server.close()
        await server.wait_closed()
        return result["server"]

    assert "version 99" in str(run(main()))


def test_a_silent_server_times_the_client_out():
    async def main():
        async def serve(reader, writer):
            await reader.read()  # says nothing until the client leaves
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        with pytest.raises(AuthError, match="no handshake within"):
            await client_handshake(reader, writer, secret=SECRET, process_id="c", timeout=0.2)
        writer.close()
        server.close()
        await server.wait_closed()

    run(main())


@pytest.fixture
def no_secrets(monkeypatch, tmp_path):
    for name in ("RAYJET_DATA_PLANE_SECRET", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_cluster_secret_sources_in_order(no_secrets, monkeypatch):
    assert cluster_secret() is None
    default = no_secrets / ".ray" / "auth_token"
    default.parent.mkdir()
    default.write_text("  \n")
    assert cluster_secret() is None  # empty counts as none
    default.write_text("default-token\n")
    assert cluster_secret() == b"default-token"
    custom = no_secrets / "token"
    custom.write_text("path-token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(custom))
    assert cluster_secret() == b"path-token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(no_secrets / "missing"))
    assert cluster_secret() is None  # as Ray: a named file is the only place looked at
    monkeypatch.setenv("RAY_AUTH_TOKEN", "env-token")
    assert cluster_secret() == b"env-token"
    monkeypatch.setenv("RAYJET_DATA_PLANE_SECRET", "data-plane")
    assert cluster_secret() == b"data-plane"
