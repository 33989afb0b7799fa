"""The `rayjet` command as a user runs it: separate OS processes from a fresh environment.

A head is started with `rayjet server start` (its own ports and data dir, beside the test
session's Ray); every command is the installed console script in a new process whose
environment holds no Ray setting of the test (no RAY_ADDRESS, no RAY_AUTH_MODE): the token
authentication of the head must be found the way a new shell finds it. Then the head is
stopped and started again with the same data dir, and everything is back.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

RAYJET = str(Path(sys.executable).parent / "rayjet")
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as sock:  # an ephemeral port: outside Ray's worker port range
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fresh_env(**extra: str) -> dict[str, str]:
    """This machine's environment without the test session's Ray or rayjet settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "RAYJET_", "PYTEST", "COV_"))}
    env.update(COLUMNS="200", **extra)
    return env


class Shell:
    """A user's shell: ``sh("stream", "ls")`` runs `rayjet stream ls` as a new process."""

    def __init__(self, address: str, data_dir: Path, ports: dict[str, int]) -> None:
        self.address, self.data_dir, self.ports = address, data_dir, ports
        # the head's gateway: stream, consumer and publish commands go through it
        self.gateway = f"nats://127.0.0.1:{ports['gateway']}"
        self.env = fresh_env(RAY_ADDRESS=address, RAYJET_GATEWAY=self.gateway)

    def __call__(self, *args: object, code: int = 0, env: dict[str, str] | None = None,
                 timeout: float = 180) -> subprocess.CompletedProcess:
        done = subprocess.run([RAYJET, *map(str, args)], capture_output=True, text=True,
                              env=self.env if env is None else env, timeout=timeout,
                              cwd=self.data_dir.parent)
        assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
        return done

    def json(self, *args: object, **kw) -> dict:
        return json.loads(self("--json", *args, **kw).stdout)

    def start(self) -> dict:
        p = self.ports
        return json.loads(self(
            "--json", "server", "start", "--data-dir", self.data_dir, "--port", p["gcs"],
            "--client-port", p["client"], "--agent-port", p["agent"], "--no-dashboard",
            "--gateway-port", p["gateway"], "--gateway-http-port", p["http"],
            env=fresh_env()).stdout)

    def stop(self) -> dict:
        return json.loads(self("--json", "server", "stop", "--port", self.ports["gcs"],
                               env=fresh_env()).stdout)


@pytest.fixture(scope="module")
def sh(ray_session, tmp_path_factory):
    # ray_session first: the test session's own Ray must exist before this head does
    ports = {"gcs": free_port(), "client": free_port(), "agent": free_port(),
             "gateway": free_port(), "http": free_port()}
    data_dir = tmp_path_factory.mktemp("cli-user") / "data"
    shell = Shell(f"127.0.0.1:{ports['gcs']}", data_dir, ports)
    try:
        started = shell.start()
        assert started["data_dir"] == str(data_dir) and started["auth"] == "token"
        assert started["gateway"] == shell.gateway
        assert started["monitor"] == f"http://127.0.0.1:{ports['http']}"
        with urllib.request.urlopen(started["monitor"] + "/healthz", timeout=60) as resp:
            assert json.loads(resp.read()) == {"status": "ok"}
        yield shell
    finally:
        subprocess.run([RAYJET, "server", "stop", "--port", str(ports["gcs"]), "--force"],
                       env=fresh_env(), capture_output=True, timeout=120)


def test_seed_walkthrough_from_new_shells_survives_a_restart(sh, tmp_path):
    sh("stream", "add", "ORDERS", "--subjects", "ORDERS.*", "--storage", "file",
       "--replicas", "1", "--dupe-window", "2m", "--defaults")
    acks = [sh.json("req", "-H", "Nats-Msg-Id:1", "ORDERS.new", f"hello{i}")
            for i in range(1, 5)]
    assert [a["seq"] for a in acks] == [1, 1, 1, 1]
    assert [bool(a.get("duplicate")) for a in acks] == [False, True, True, True]
    info = sh.json("stream", "info", "ORDERS")
    assert info["state"]["messages"] == 1 and info["state"]["last_seq"] == 1
    assert re.search(r"Messages: +1\b", sh("stream", "info", "ORDERS").stdout)

    sh("consumer", "add", "ORDERS", "DISPATCH", "--pull", "--filter", "ORDERS.processed",
       "--ack", "explicit", "--deliver", "all")
    sh("pub", "ORDERS.processed", "order {{Count}}", "--count", "3")
    got = sh("consumer", "next", "ORDERS", "DISPATCH", "--count", "2", "--raw").stdout
    assert got.split() == ["order", "1", "order", "2"]
    ci = sh.json("consumer", "info", "ORDERS", "DISPATCH")
    assert ci["ack_floor"]["stream_seq"] == 3 and ci["num_pending"] == 1

    sh("kv", "add", "profiles", "--history", "5")
    sh("kv", "put", "profiles", "sue.color", "blue")
    sh("kv", "put", "profiles", "sue.color", "green")
    assert sh("kv", "get", "profiles", "sue.color", "--raw").stdout.strip() == "green"
    history = sh.json("kv", "history", "profiles", "sue.color")
    assert [e["data"] for e in history] == ["blue", "green"]

    blob = os.urandom(300_000)
    src, out = tmp_path / "big.bin", tmp_path / "out.bin"
    src.write_bytes(blob)
    sh("object", "add", "files")
    # a terminal would show the bar; FORCE_COLOR makes rich draw it into the pipe
    put = sh("object", "put", "files", src, env={**sh.env, "FORCE_COLOR": "1"})
    assert "big.bin" in put.stdout + put.stderr and "━" in put.stdout + put.stderr
    sh("object", "get", "files", "big.bin", "-O", out)
    assert out.read_bytes() == blob

    stopped = sh.stop()
    assert stopped["port"] == sh.ports["gcs"] and stopped["processes"] > 0
    sh("stream", "ls", code=1)  # the head is gone: a clear error, not a hang
    sh.start()

    info = sh.json("stream", "info", "ORDERS")
    assert info["state"]["messages"] == 4 and info["state"]["last_seq"] == 4
    jsz = sh.json("server", "report")  # the cluster's data dir, not this shell's default
    assert jsz["config"]["store_dir"] == str(sh.data_dir) and jsz["streams"] == 3
    ci = sh.json("consumer", "info", "ORDERS", "DISPATCH")
    assert ci["ack_floor"]["stream_seq"] == 3 and ci["num_pending"] == 1
    assert sh("kv", "get", "profiles", "sue.color", "--raw").stdout.strip() == "green"
    out.unlink()
    sh("object", "get", "files", "big.bin", "-O", out)
    assert out.read_bytes() == blob


def test_commands_go_through_the_gateway_when_one_runs(sh, tmp_path):
    """With the head's gateway found, stream, consumer, publish, key-value and object store
    commands are NATS requests: they work with no Ray reachable at all, and give the same
    answers and errors as the Ray path; RAYJET_GATEWAY=off takes the Ray path."""
    no_ray = {**sh.env, "RAY_ADDRESS": f"127.0.0.1:{free_port()}"}
    sh("stream", "add", "VIAGW", "--subjects", "viagw.*", "--defaults", env=no_ray)
    acks = sh.json("pub", "viagw.a", "m{{Count}}", "--count", "25", env=no_ray)
    assert acks["published"] == 25 and [a["seq"] for a in acks["acks"]] == list(range(1, 26))
    assert sh.json("req", "viagw.b", "one", "-H", "Nats-Msg-Id:x", env=no_ray)["seq"] == 26
    assert sh.json("req", "viagw.b", "one", "-H", "Nats-Msg-Id:x", env=no_ray)["duplicate"]
    msg = sh.json("stream", "get", "VIAGW", "26", env=no_ray)
    assert msg["subject"] == "viagw.b" and msg["headers"] == {"Nats-Msg-Id": "x"}
    sh("consumer", "add", "VIAGW", "W", "--pull", "--filter", "viagw.a", "--ack", "explicit",
       "--deliver", "all", env=no_ray)
    assert sh.json("consumer", "info", "VIAGW", "W", env=no_ray)["num_pending"] == 25
    got = sh("consumer", "next", "VIAGW", "W", "--count", "2", "--raw", env=no_ray).stdout
    assert got.split() == ["m1", "m2"]
    ci = sh.json("consumer", "info", "VIAGW", "W", env=no_ray)
    assert ci["ack_floor"]["stream_seq"] == 2 and ci["num_pending"] == 23
    assert [c["name"] for c in sh.json("consumer", "ls", "VIAGW", env=no_ray)] == ["W"]
    err = sh.json("stream", "info", "NOPE", code=1, env=no_ray)["error"]
    assert err["err_code"] == 10059
    err = sh.json("pub", "nowhere.x", "hi", code=1, env=no_ray)["error"]
    assert err["err_code"] == 10059
    # `sub` follows the stream through an ordered consumer of the gateway's
    tail = sh("--json", "sub", "viagw.b", "--all", "--count", "1", env=no_ray).stdout
    assert [json.loads(line)["seq"] for line in tail.splitlines()] == [26]
    sh("stream", "rmm", "VIAGW", "1", "-f", env=no_ray)
    assert sh.json("stream", "purge", "VIAGW", "-f", env=no_ray)["purged"] == 25
    # the Ray path sees what the gateway path did
    info = sh.json("stream", "info", "VIAGW", env={**sh.env, "RAYJET_GATEWAY": "off"})
    assert info["state"]["first_seq"] == 27 and info["state"]["messages"] == 0
    sh("stream", "rm", "VIAGW", "-f", env=no_ray)
    # key-value commands too
    sh("kv", "add", "gwkv", "--history", "5", env=no_ray)
    assert sh.json("kv", "put", "gwkv", "a.b", "one", env=no_ray)["revision"] == 1
    sh("kv", "put", "gwkv", "a.b", "two", env=no_ray)
    sh("kv", "put", "gwkv", "c", "three", env=no_ray)
    assert sh("kv", "get", "gwkv", "a.b", "--raw", env=no_ray).stdout.strip() == "two"
    history = sh.json("kv", "history", "gwkv", "a.b", env=no_ray)
    assert [(e["revision"], e["data"]) for e in history] == [(1, "one"), (2, "two")]
    assert sh.json("kv", "keys", "gwkv", env=no_ray) == ["a.b", "c"]
    sh("kv", "update", "gwkv", "c", "stale", "1", code=1, env=no_ray)  # revision 3 is last
    watched = sh("--json", "kv", "watch", "gwkv", "--count", "2", env=no_ray).stdout
    assert [(e["key"], e["revision"], e["data"]) for e in map(json.loads, watched.splitlines())
            ] == [("a.b", 2, "two"), ("c", 3, "three")]
    sh("kv", "del", "gwkv", "c", "-f", env=no_ray)
    err = sh.json("kv", "get", "gwkv", "c", code=1, env=no_ray)["error"]
    assert err["code"] == 404
    assert sh.json("kv", "status", "gwkv", env=no_ray)["values"] == 4
    ray_path = {**sh.env, "RAYJET_GATEWAY": "off"}
    # a bucket made through the gateway is hosted as the Python API hosts buckets
    assert sh.json("stream", "info", "KV_gwkv", env=ray_path)["config"]["hosting"] == "shared"
    assert sh("kv", "get", "gwkv", "a.b", "--raw", env=ray_path).stdout.strip() == "two"
    sh("kv", "rm", "gwkv", "-f", env=no_ray)
    # object store commands too
    src = tmp_path / "gw.bin"
    src.write_bytes(os.urandom(300_000))
    sh("object", "add", "gwobj", env=no_ray)
    sh("object", "put", "gwobj", str(src), env=no_ray)
    out = tmp_path / "gw.out"
    sh("object", "get", "gwobj", "gw.bin", "-O", str(out), env=no_ray)
    assert out.read_bytes() == src.read_bytes()
    assert [o["name"] for o in sh.json("object", "ls", "gwobj", env=no_ray)] == ["gw.bin"]
    watched = sh("--json", "object", "watch", "gwobj", "--count", "1", env=no_ray).stdout
    assert [(o["name"], o["size"]) for o in map(json.loads, watched.splitlines())
            ] == [("gw.bin", 300_000)]
    sh("object", "rm", "gwobj", "-f", env=no_ray)
    # without the gateway, and without Ray: a clear error
    err = sh("stream", "ls", code=1, env={**no_ray, "RAYJET_GATEWAY": "off"}).stderr
    assert "rayjet error" in err


def test_no_cluster_and_stop_of_nothing_are_clear_errors(sh):
    err = sh("--address", f"127.0.0.1:{free_port()}", "stream", "ls", code=1).stderr
    assert "no Ray cluster" in err and "rayjet server start" in err
    err = sh("server", "stop", "--port", free_port(), code=1).stderr
    assert "no Ray head listens on port" in err


def test_another_machine_joins_with_the_token_and_is_refused_without_it(sh, tmp_path):
    """A machine without ~/.ray (a new HOME) joins by host:port given the head's token."""
    token = (Path.home() / ".ray" / "auth_token").read_text().strip()
    address = f"{socket.gethostbyname(socket.gethostname())}:{sh.ports['gcs']}"
    other = fresh_env(HOME=str(tmp_path), RAY_ADDRESS=address)
    names = sh.json("stream", "ls", env={**other, "RAY_AUTH_TOKEN": token})
    assert isinstance(names, list)

    err = sh("stream", "ls", code=1, env=other).stderr
    assert "requires a token" in err and "err_code=0, code=401" in err
    err = sh("stream", "ls", code=1, env={**other, "RAY_AUTH_TOKEN": "0" * 64}).stderr
    assert "refused this machine's token" in err
    err = sh("stream", "ls", code=1, env={**other, "RAY_AUTH_TOKEN": token,
                                          "RAY_AUTH_MODE": "disabled"}).stderr
    assert "requires a token" in err and "RAY_AUTH_MODE is 'disabled'" in err


def test_python_and_ray_tasks_connect_by_address(sh):
    """`rayjet.connect(address=...)` from a fresh interpreter, and from a Ray task on that
    cluster (which reuses the task's Ray session)."""
    script = textwrap.dedent(f"""
        import ray, rayjet
        js = rayjet.connect(address={sh.address!r})
        js.add_stream(name="TASKS", subjects=["tasks.>"])

        @ray.remote(num_cpus=0)
        def publish(i):
            import rayjet
            return rayjet.connect().publish(f"tasks.{{i}}", b"x").seq

        seqs = sorted(ray.get([publish.remote(i) for i in range(3)]))
        print(seqs, js.stream_info("TASKS").state.messages)
        js.close()
    """)
    done = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True,
                          env=fresh_env(), timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[1, 2, 3] 3"


def test_nats_clients_use_the_gateway_process(sh):
    """`rayjet gateway` as its own process: nats.py publishes, pulls and acks through it
    with token auth; a bad token and a malformed line get nats-server's -ERR; what was
    stored is there for the rayjet CLI after the gateway is stopped."""
    import asyncio

    import nats
    from nats.errors import NoRespondersError

    port, http_port = free_port(), free_port()
    gw = subprocess.Popen([RAYJET, "gateway", "--port", str(port), "--token", "s3cret",
                           "--http-port", str(http_port)],
                          env=sh.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, cwd=sh.data_dir.parent)
    try:
        line = gw.stdout.readline()
        assert f"nats://127.0.0.1:{port}" in line, (line, gw.stderr.read() if gw.poll() else "")
        monitor = f"http://127.0.0.1:{http_port}"
        assert f"monitoring on {monitor}" in line
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(monitor + "/varz", timeout=30)
        assert refused.value.code == 401  # the monitor asks for the clients' token
        asked = urllib.request.Request(monitor + "/varz",
                                       headers={"Authorization": "Bearer s3cret"})
        with urllib.request.urlopen(asked, timeout=30) as resp:
            assert json.loads(resp.read())["port"] == port
        url = f"nats://s3cret@127.0.0.1:{port}"

        async def talk() -> dict:
            nc = await nats.connect(url)
            js = nc.jetstream()
            await js.add_stream(name="GW", subjects=["gw.>"])
            acks = [await js.publish("gw.in", b"x", headers={"Nats-Msg-Id": "1"})
                    for _ in range(3)]
            for i in range(5):
                await js.publish("gw.more", f"m{i}".encode())
            sub = await js.pull_subscribe("gw.more", "worker")
            msgs = await sub.fetch(5, timeout=5)
            for m in msgs:
                await m.ack()
            info = await js.consumer_info("GW", "worker")
            try:
                await nc.request("nobody.home", b"?", timeout=2)
                no_responders = False
            except NoRespondersError:
                no_responders = True
            kv = await js.create_key_value(bucket="cfg")
            await kv.put("a", b"1")
            entry = await kv.get("a")
            await nc.close()
            return {"acks": [(a.seq, bool(a.duplicate)) for a in acks],
                    "data": [m.data for m in msgs], "delivered": info.delivered.stream_seq,
                    "no_responders": no_responders, "kv": entry.value}

        out = asyncio.run(talk())
        assert out["acks"] == [(1, False), (1, True), (1, True)]
        assert out["data"] == [f"m{i}".encode() for i in range(5)]
        assert out["delivered"] == 6 and out["no_responders"] and out["kv"] == b"1"

        async def refused(connect_line: bytes) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await reader.readline()  # INFO
            writer.write(connect_line)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(200), 5)
            writer.close()
            return answer

        assert b"-ERR 'Authorization Violation'" in asyncio.run(
            refused(b'CONNECT {"auth_token":"wrong"}\r\nPING\r\n'))
        assert b"-ERR 'Unknown Protocol Operation'" in asyncio.run(
            refused(b'CONNECT {"auth_token":"s3cret"}\r\nHELLO there\r\n'))
    finally:
        gw.terminate()
        assert gw.wait(30) == 0
    info = sh.json("stream", "info", "GW")
    assert info["state"]["messages"] == 6


def test_detached_gateway_outlives_the_command(sh):
    """`rayjet gateway --detach` returns at once and leaves the gateway running as a Ray
    actor; `--stop` takes it down."""
    import asyncio

    import nats

    port = free_port()
    started = sh.json("gateway", "--detach", "--port", port)
    assert started["url"] == f"nats://127.0.0.1:{port}"

    async def roundtrip() -> int:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=0)
        js = nc.jetstream()
        await js.add_stream(name="DETACHED", subjects=["detached.>"])
        ack = await js.publish("detached.a", b"x")
        await nc.close()
        return ack.seq

    assert asyncio.run(roundtrip()) == 1
    assert sh.json("gateway", "--detach", "--port", port)["url"] == started["url"]  # the same
    assert sh.json("gateway", "--stop", "--port", port) == {"stopped": True, "port": port}
    with pytest.raises(ConnectionRefusedError):  # nothing listens any more
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert sh.json("stream", "info", "DETACHED")["state"]["messages"] == 1


def test_detached_gateway_serves_tls(sh, tmp_path):
    import asyncio
    import ssl

    import nats

    from tests.gateway.test_gateway_tls import _self_signed

    cert, key = _self_signed(tmp_path)
    port = free_port()
    started = sh.json("gateway", "--detach", "--port", port, "--tls-cert", cert,
                      "--tls-key", key)
    assert started["url"] == f"tls://127.0.0.1:{port}"

    async def roundtrip() -> bytes:
        nc = await nats.connect(f"tls://localhost:{port}", max_reconnect_attempts=0,
                                tls=ssl.create_default_context(cafile=str(cert)))
        sub = await nc.subscribe("tls.x")
        await nc.publish("tls.x", b"secret")
        msg = await sub.next_msg(timeout=5)
        await nc.close()
        return msg.data

    try:
        assert asyncio.run(roundtrip()) == b"secret"
        # the CLI's commands go through it over TLS once told which CA to trust (no Ray
        # reachable: the Ray path would fail), whether the URL says tls:// or the gateway's
        # INFO asks for TLS
        no_ray = {**sh.env, "RAY_ADDRESS": f"127.0.0.1:{free_port()}",
                  "RAYJET_GATEWAY_CA": str(cert)}
        via_tls = {**no_ray, "RAYJET_GATEWAY": f"tls://localhost:{port}"}
        sh("stream", "add", "OVERTLS", "--subjects", "overtls.*", "--defaults", env=via_tls)
        assert sh.json("pub", "overtls.a", "hi", env=via_tls)["acks"][0]["seq"] == 1
        upgraded = {**no_ray, "RAYJET_GATEWAY": f"nats://localhost:{port}"}
        assert sh.json("stream", "info", "OVERTLS", env=upgraded)["state"]["messages"] == 1
        # a certificate it does not trust: an error naming the setting, not a silent detour
        untrusted = {**via_tls, "RAYJET_GATEWAY_CA": ""}
        err = sh("stream", "info", "OVERTLS", code=1, env=untrusted).stderr
        assert "does not trust" in err and "RAYJET_GATEWAY_CA" in err
        sh("stream", "rm", "OVERTLS", "-f", env=via_tls)
    finally:
        sh("gateway", "--stop", "--port", port)
    bad = sh("gateway", "--detach", "--port", port, "--tls-cert", key, "--tls-key", key,
             code=2)
    assert "cannot load the TLS certificate" in bad.stderr


def test_detached_gateway_with_client_certificates(sh, tmp_path):
    """Mutual TLS (--tls-ca): the CLI presents $RAYJET_GATEWAY_CERT/KEY; without them it
    says so rather than taking the Ray path."""
    from tests.gateway.test_gateway_tls import _key_and_cert, _write

    ca = _key_and_cert("rayjet test CA", ca=True)
    ca_pem = _write(tmp_path, "ca", *ca)[0]
    server_cert, server_key = _write(tmp_path, "server", *_key_and_cert("localhost", ca))
    client_cert, client_key = _write(tmp_path, "client", *_key_and_cert("cli", ca))
    port = free_port()
    alone = sh("gateway", "--port", port, "--tls-ca", ca_pem, code=2)
    assert "--tls-ca (client certificates) needs --tls-cert and --tls-key" in alone.stderr
    sh.json("gateway", "--detach", "--port", port, "--tls-cert", server_cert,
            "--tls-key", server_key, "--tls-ca", ca_pem)
    try:
        no_ray = {**sh.env, "RAY_ADDRESS": f"127.0.0.1:{free_port()}",
                  "RAYJET_GATEWAY": f"tls://localhost:{port}", "RAYJET_GATEWAY_CA": str(ca_pem)}
        err = sh("stream", "ls", code=1, env=no_ray).stderr
        assert "client certificate" in err and "RAYJET_GATEWAY_CERT" in err
        with_cert = {**no_ray, "RAYJET_GATEWAY_CERT": str(client_cert),
                     "RAYJET_GATEWAY_KEY": str(client_key)}
        sh("stream", "add", "MTLS", "--subjects", "mtls.*", "--defaults", env=with_cert)
        assert sh.json("pub", "mtls.a", "hi", env=with_cert)["acks"][0]["seq"] == 1
        assert sh.json("stream", "info", "MTLS", env=with_cert)["state"]["messages"] == 1
        sh("stream", "rm", "MTLS", "-f", env=with_cert)
    finally:
        sh("gateway", "--stop", "--port", port)


def test_a_second_head_takes_free_ports_and_server_stop_finds_it(sh, tmp_path):
    """Another head already holds Ray's default client, agent and dashboard ports (held here
    by listeners, as a head would hold them): `server start` picks free ones and says so,
    refuses a control-store port in use naming the head there, and `server stop` without
    --port stops the head it made, not the other one."""
    held = []
    for port in (10001, 52365, 8265):
        s = socket.socket()
        try:
            s.bind(("0.0.0.0", port))
            s.listen()
            held.append(s)
        except OSError:
            s.close()  # taken already: by a head, which is what this test stands in for
    gcs = free_port()
    env = fresh_env(RAYJET_STATE_DIR=str(tmp_path / "state"))
    try:
        started = sh.json("server", "start", "--data-dir", tmp_path / "data", "--port", gcs,
                          "--no-gateway", env=env)
        ports = started["ports"]
        assert ports["gcs"] == gcs
        assert {ports["client"], ports["agent"], ports["dashboard"]}.isdisjoint(
            {10001, 52365, 8265})
        again = sh("server", "start", "--port", gcs, "--no-gateway", env=env, code=2)
        assert f"server stop --port {gcs}" in again.stderr, again.stderr
    finally:
        for s in held:
            s.close()
        stopped = sh.json("server", "stop", env=env)  # no --port, no RAY_ADDRESS
    assert stopped["port"] == gcs
    assert sh.json("stream", "ls") is not None  # the module's head still serves


def test_a_backup_restores_into_another_cluster(sh, tmp_path):
    """`stream backup` on one cluster, `stream restore` on a second head with its own data
    dir: the same messages at the same sequences, the consumer at the same position."""
    sh("stream", "add", "BACKED", "--subjects", "BACKED.*", "--storage", "file",
       "--replicas", "1", "--defaults")
    sh("pub", "BACKED.a", "m{{Count}}", "--count", "30")
    sh("stream", "rmm", "BACKED", "5", "--force")
    sh("consumer", "add", "BACKED", "READER", "--pull", "--ack", "explicit", "--deliver",
       "all")
    sh("consumer", "next", "BACKED", "READER", "--count", "3", "--raw")
    archive = tmp_path / "backed.rjb"
    made = sh.json("stream", "backup", "BACKED", archive)
    assert made["messages"] == 29 and made["consumers"] == 1 and archive.stat().st_size > 0
    before = sh.json("stream", "info", "BACKED")["state"]
    consumer = sh.json("consumer", "info", "BACKED", "READER")

    gcs = free_port()
    env = fresh_env(RAYJET_STATE_DIR=str(tmp_path / "state"))
    other = fresh_env(RAY_ADDRESS=f"127.0.0.1:{gcs}")
    try:
        sh("server", "start", "--data-dir", tmp_path / "other", "--port", gcs,
           "--no-gateway", "--no-dashboard", env=env)
        damaged = tmp_path / "damaged.rjb"
        raw = bytearray(archive.read_bytes())
        raw[len(raw) // 3] ^= 1
        damaged.write_bytes(bytes(raw))
        refused = sh("stream", "restore", damaged, env=other, code=1)
        assert "10062" in refused.stderr + refused.stdout
        assert "BACKED" not in json.dumps(sh.json("stream", "ls", env=other))
        restored = sh.json("stream", "restore", archive, env=other)
        assert restored["config"]["name"] == "BACKED"
        after = sh.json("stream", "info", "BACKED", env=other)["state"]
        keys = ("messages", "bytes", "first_seq", "last_seq", "num_deleted")
        assert {k: after.get(k) for k in keys} == {k: before.get(k) for k in keys}
        again = sh.json("consumer", "info", "BACKED", "READER", env=other)
        for key in ("delivered", "ack_floor", "num_ack_pending", "num_pending"):
            assert again[key] == consumer[key], key
        got = sh("consumer", "next", "BACKED", "READER", "--count", "1", "--raw",
                 env=other).stdout
        assert got.split() == ["m4"]
    finally:
        sh("server", "stop", "--port", gcs, "--force", env=env)


ACCOUNTS_CONF = """
accounts {
  A: { jetstream: enabled, users: [ {user: a, password: a} ] }
  B: { users: [ {user: b, password: b} ] }
}
"""


async def _logins(url: str) -> dict[str, str]:
    import nats

    out = {}
    for user, password in (("a", "a"), ("b", "b"), ("b", "b2"), ("", "")):
        try:
            nc = await nats.connect(url, user=user or None, password=password or None,
                                    allow_reconnect=False, max_reconnect_attempts=0,
                                    connect_timeout=10)
        except Exception as exc:  # noqa: BLE001 - what a client sees is the observation
            out[f"{user}:{password}"] = type(exc).__name__
            continue
        out[f"{user}:{password}"] = "connected"
        if user == "a":
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="CONFIGURED", subjects=["configured.>"])
            out["a_publish"] = (await js.publish("configured.x", b"1")).seq
            await js.delete_stream("CONFIGURED")
        elif user == "b":
            try:
                await nc.jetstream(timeout=5).account_info()
            except Exception as exc:  # noqa: BLE001
                out["b_jetstream"] = getattr(exc, "err_code", type(exc).__name__)
        await nc.close()
    return out


def test_a_server_with_accounts_from_its_configuration_file(sh, tmp_path):
    """`server start --config`: users, accounts and JetStream per account as the file says;
    `server reload` changes them for the running gateway; a file that cannot be used is
    refused at start and at reload, the configuration in force kept."""
    import asyncio

    conf = tmp_path / "server.conf"
    conf.write_text("accounts { A: {")
    gcs, gw = free_port(), free_port()
    env = fresh_env(RAYJET_STATE_DIR=str(tmp_path / "state"))
    other = fresh_env(RAYJET_STATE_DIR=str(tmp_path / "state"), RAY_ADDRESS=f"127.0.0.1:{gcs}")
    start = ("server", "start", "--data-dir", tmp_path / "data", "--port", gcs,
             "--no-dashboard", "--gateway-port", gw, "--no-gateway-monitor", "--config", conf)
    refused = sh(*start, env=env, code=2)
    assert "configuration parse error" in refused.stderr and f"{conf}:1" in refused.stderr
    conf.write_text(ACCOUNTS_CONF)
    try:
        sh(*start, env=env)
        url = f"nats://127.0.0.1:{gw}"
        first = asyncio.run(_logins(url))
        assert first == {"a:a": "connected", "a_publish": 1, "b:b": "connected",
                         "b_jetstream": 10039, "b:b2": "Error", ":": "Error"}
        conf.write_text(ACCOUNTS_CONF.replace("password: b}", "password: b2}"))
        sh("server", "reload", "--gateway-port", gw, env=other)
        second = asyncio.run(_logins(url))
        assert (second["b:b"], second["b:b2"]) == ("Error", "connected")
        conf.write_text("broken {")
        bad = sh("server", "reload", "--gateway-port", gw, env=other, code=2)
        assert "the old configuration stays" in bad.stderr
        assert asyncio.run(_logins(url))["b:b2"] == "connected"
    finally:
        sh("server", "stop", "--port", gcs, "--force", env=env)
