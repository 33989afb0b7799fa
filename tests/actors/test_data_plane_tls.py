"""Data-plane TLS as replica processes configure it: the ``RAYJET_DATA_PLANE_TLS_*``
settings, two process data planes exchanging raft messages over mutual TLS, and
settings that cannot be used leaving a process on actor calls, saying why."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from rayjet.actors import data_plane
from rayjet.dataplane import DataPlaneSender, TLSConfigError, tls_from_env
from rayjet.dataplane.tls import CA_ENV, CERT_ENV, KEY_ENV, SERVER_NAME_ENV
from tests.dataplane.helpers import SECRET, msg, run, wait_until
from tests.tls_certs import self_signed

NAME = "rayjet-cluster"  # the name the cluster's one certificate carries


@pytest.fixture
def tls_env(tmp_path, monkeypatch):
    cert, key = self_signed(tmp_path, NAME)
    env = {CERT_ENV: str(cert), KEY_ENV: str(key), CA_ENV: str(cert), SERVER_NAME_ENV: NAME}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("RAYJET_DATA_PLANE_SECRET", SECRET.decode())
    return env


def test_settings_unset_incomplete_or_unusable():
    assert tls_from_env({}) is None
    with pytest.raises(TLSConfigError, match=f"{KEY_ENV}.*{CA_ENV}"):
        tls_from_env({CERT_ENV: "/x/cert.pem"})
    with pytest.raises(TLSConfigError, match="unusable"):
        tls_from_env({CERT_ENV: "/nope/c.pem", KEY_ENV: "/nope/k.pem", CA_ENV: "/nope/ca.pem"})


def test_two_processes_planes_talk_over_mutual_tls(tls_env):
    async def main():
        loop = asyncio.get_running_loop()
        a, b = data_plane.ProcessDataPlane(loop), data_plane.ProcessDataPlane(loop)
        got = []
        a.serve("rayjet.stream.G-r0", lambda messages: None)
        b.serve("rayjet.stream.G-r1", got.extend)
        await wait_until(lambda: a.address is not None and b.address is not None,
                         what="both planes serving")
        assert a.tls and b.tls
        assert a.sender.send(b.address, "rayjet.stream.G-r1", [msg(1), msg(2)])
        await wait_until(lambda: len(got) == 2, what="messages over TLS")
        assert [m.index for m in got] == [1, 2]
        # a client with the secret but without a certificate is refused by the server
        bare = ssl.create_default_context(cafile=tls_env[CA_ENV])
        stranger = DataPlaneSender(secret=SECRET, ssl_context=bare, server_hostname=NAME)
        stranger.send(b.address, "rayjet.stream.G-r1", [msg(3)])
        await wait_until(lambda: stranger.stats["connect_failures"] >= 1
                         or b.server.stats.get("refused", 0) >= 1, what="refusal")
        await asyncio.sleep(0.2)
        assert [m.index for m in got] == [1, 2]
        await stranger.close()
        await a.close()
        await b.close()

    run(main())


def test_unusable_settings_leave_the_process_on_actor_calls(tls_env, monkeypatch):
    monkeypatch.delenv(KEY_ENV)

    async def main():
        plane = data_plane.ProcessDataPlane(asyncio.get_running_loop())
        plane.serve("rayjet.stream.G-r0", lambda messages: None)
        await wait_until(lambda: plane.failed is not None, what="the start to fail")
        assert KEY_ENV in plane.failed
        assert plane.address is None and plane.sender is None
        await plane.close()

    run(main())
