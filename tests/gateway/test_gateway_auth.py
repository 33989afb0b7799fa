"""Accounts, users and permissions through the gateway, compared with nats-server: both
read the same configuration file and get the same protocol sessions; what each client
receives (every line after INFO) must be the same."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from benchmarks.natsbase import find_nats_server, free_port
from rayjet.auth.nkeys import KeyPair
from rayjet.errors import ServerConfigError
from rayjet.gateway.embedded import GatewayThread
from rayjet.gateway.server import GatewayOptions

NKEY_USER = KeyPair.create("U")
HASH = bcrypt.hashpw(b"b-pass", bcrypt.gensalt(4)).decode()
CONFIG = f"""
accounts {{
  A: {{
    users: [
      {{user: a, password: a}}
      {{user: ro, password: ro, permissions: {{
          publish: {{allow: ["reply.>", "_INBOX.>"]}}
          subscribe: {{allow: ["orders.>", "_INBOX.>", "work v1"], deny: ["orders.secret"]}}
      }}}}
      {{user: svc, password: svc, permissions: {{
          subscribe: "svc.>", allow_responses: {{max: 1}} }}}}
    ]
  }}
  B: {{
    users: [ {{user: b, password: "{HASH}"}}, {{nkey: {NKEY_USER.public_key}}} ]
  }}
}}
"""


class Client:
    """A raw protocol client: what it sends, and every line it gets back."""

    def __init__(self, port: int, **connect) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.info = json.loads(self._line()[5:])
        opts = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1,
                **connect}
        if "seed" in opts:
            key = KeyPair(opts.pop("seed"))
            opts["nkey"], opts["sig"] = key.public_key, key.sign(self.info["nonce"].encode())
        self.send(f"CONNECT {json.dumps(opts)}")

    def _line(self) -> str:
        while b"\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode()

    def line(self) -> str:
        """The next line, INFO reduced to the account it names (sent after the first
        PONG), MSG with its payload."""
        line = self._line()
        if line.startswith("MSG "):
            line += " " + self._line()
        elif line.startswith("HMSG "):  # headers and payload on one line, the rtt left out
            total = int(line.split()[-1])
            while len(self.buf) < total + 2:
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("closed")
                self.buf += data
            body, self.buf = self.buf[:total].decode(), self.buf[total + 2:]
            body = re.sub(r'"rtt":\d+', '"rtt":<rtt>', body)
            line = " ".join(line.split()[:-2]) + " " + body.replace("\r\n", " | ")
        elif line.startswith("INFO "):
            doc = json.loads(line[5:])
            line = f"INFO account={doc.get('remote_account')} " \
                   f"connect_info={doc.get('connect_info')}"
        return line

    def send(self, *lines: str) -> None:
        self.sock.sendall(b"".join(line.encode() + b"\r\n" for line in lines))

    def sync(self) -> list[str]:
        """Everything received up to the PONG of a PING sent now (or up to the close)."""
        self.send("PING")
        out = []
        while True:
            try:
                line = self.line()
            except (ConnectionError, OSError):
                out.append("<closed>")
                return out
            if line == "PONG":
                return out
            out.append(line)

    def close(self) -> None:
        self.sock.close()


def sessions(port: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    bad = Client(port, user="a", **{"pass": "wrong"})
    out["bad_password"] = bad.sync()
    anonymous = Client(port)
    out["no_credentials"] = anonymous.sync()

    a = Client(port, user="a", **{"pass": "a"})
    b = Client(port, user="b", **{"pass": "b-pass"})
    nk = Client(port, seed=NKEY_USER.seed)
    ro = Client(port, user="ro", **{"pass": "ro"})
    svc = Client(port, user="svc", **{"pass": "svc"})
    a.send("SUB orders.> 1", "SUB _INBOX.a.> 2")
    b.send("SUB > 1")
    nk.send("SUB orders.* 1")
    ro.send("SUB orders.> 1", "SUB orders.secret 2", "SUB other 3", "SUB work v2 4",
            "SUB work 5", "SUB work v1 6", "PUB orders.x 2", "hi", "PUB reply.x 2", "ok")
    svc.send("SUB svc.> 1")
    for c in (a, b, nk, svc):
        out.setdefault("setup", []).extend(c.sync())
    out["ro_setup"] = ro.sync()
    # accounts: A's messages stay in A, B's in B
    a.send("PUB orders.secret 1", "s", "PUB orders.open 1", "o")
    b.send("PUB orders.b 1", "b")
    out["a_publisher"] = a.sync()
    out["b_publisher"] = b.sync()
    out["ro_gets"] = ro.sync()  # orders.open, not orders.secret (a denied delivery)
    out["b_gets"] = b.sync()
    out["nkey_user_gets"] = nk.sync()
    # allow_responses: one answer to a reply subject it was handed, nothing else
    a.send("PUB svc.time _INBOX.a.1 3", "now")
    a.sync()
    out["svc_request"] = svc.sync()
    svc.send("PUB _INBOX.a.1 2", "t1", "PUB _INBOX.a.1 2", "t2", "PUB svc.other 1", "x")
    out["svc_answers"] = svc.sync()
    out["a_gets_one_answer"] = a.sync()
    for c in (bad, anonymous, a, b, nk, ro, svc):
        c.close()
    return out


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("auth") / "server.conf"
    path.write_text(CONFIG)
    return path


@pytest.fixture(scope="module")
def on_nats_server(config_file) -> dict[str, list[str]]:
    with nats_server(config_file) as (port, _):
        return sessions(port)


def test_accounts_and_permissions_answer_as_nats_server(config_file, on_nats_server):
    with gateway_with(config_file) as gw:
        got = sessions(gw.port)
    assert on_nats_server["ro_gets"][-1] == "MSG orders.open 1 1 o"  # the scenario holds
    assert got == on_nats_server



BEFORE = """
accounts { A: { users: [
  {user: keep, password: k}
  {user: gone, password: g}
  {user: narrowed, password: n, permissions: {subscribe: ">"}}
] } }
"""
AFTER = """
accounts { A: { users: [
  {user: keep, password: k}
  {user: narrowed, password: n, permissions: {subscribe: "orders.>"}}
  {user: fresh, password: f}
] } }
"""


def reload_sessions(port: int, reload) -> dict[str, list[str]]:
    keep = Client(port, user="keep", **{"pass": "k"})
    gone = Client(port, user="gone", **{"pass": "g"})
    narrowed = Client(port, user="narrowed", **{"pass": "n"})
    narrowed.send("SUB orders.> 1", "SUB other 2")
    for c in (keep, gone, narrowed):
        c.sync()
    reload()
    out = {"gone": [], "narrowed": []}
    while out["gone"][-1:] != ["<closed>"]:  # until the server closes it
        try:
            out["gone"].append(gone.line())
        except (ConnectionError, OSError):
            out["gone"].append("<closed>")
    while not out["narrowed"][-1:] or out["narrowed"][-1].startswith("INFO"):
        out["narrowed"].append(narrowed.line())  # up to the subscription it lost
    keep.send("PUB orders.1 1", "a", "PUB other 1", "b")
    keep.sync()
    out["narrowed"] += narrowed.sync()
    out["keep"] = keep.sync()
    fresh = Client(port, user="fresh", **{"pass": "f"})
    out["fresh"] = fresh.sync()
    for c in (keep, gone, narrowed, fresh):
        c.close()
    return out


def test_a_reload_applies_new_users_and_permissions_as_nats_server(tmp_path):
    conf = tmp_path / "server.conf"

    def nats_reload():
        conf.write_text(AFTER)
        proc.send_signal(signal.SIGHUP)

    conf.write_text(BEFORE)
    with nats_server(conf) as (port, proc):
        expected = reload_sessions(port, nats_reload)
    assert expected["gone"][-1] == "<closed>"  # closed without a word, as nats-server does

    conf.write_text(BEFORE)
    with gateway_with(conf) as gw:

        def gateway_reload():
            conf.write_text(AFTER)
            gw.reload()

        got = reload_sessions(gw.port, gateway_reload)
        conf.write_text("accounts { A: { users: [ {user: x} ] }, B: { users: [ {user: x} ] } }")
        with pytest.raises(ServerConfigError, match="duplicate user"):
            gw.reload()  # refused: the configuration in force stays
        assert Client(gw.port, user="fresh", **{"pass": "f"}).sync() == []
    assert got == expected


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, "nats-server did not start"
            time.sleep(0.05)

@contextlib.contextmanager
def nats_server(conf: Path, *args: str) -> Iterator[tuple[int, subprocess.Popen]]:
    """nats-server reading ``conf`` on a free port (more flags in ``args``): its port and
    process, killed on leaving."""
    port = free_port()
    proc = subprocess.Popen([find_nats_server(), "-c", str(conf), "-a", "127.0.0.1",
                             "-p", str(port), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port)
        yield port, proc
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def gateway_with(conf: Path, **options) -> Iterator[GatewayThread]:
    """A core-NATS gateway reading ``conf`` on a free port, stopped on leaving."""
    gw = GatewayThread(None, GatewayOptions(port=0, config=str(conf), **options))
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()




CROSSING = """
accounts {
  A: {
    users: [ {user: a, password: a} ]
    exports: [ {stream: "events.>"}, {service: "req.>"},
               {stream: "private.>", accounts: [C]} ]
  }
  B: {
    users: [ {user: b, password: b} ]
    imports: [
      {stream: {account: A, subject: "events.>"}, prefix: from_a}
      {service: {account: A, subject: "req.time"}, to: time}
    ]
  }
  C: {
    users: [ {user: c, password: c} ]
    imports: [ {stream: {account: A, subject: "private.>"}}
               {stream: {account: A, subject: "events.>"}, to: "ev.>"} ]
  }
}
"""


def crossing_sessions(port: int) -> dict[str, list[str]]:
    a = Client(port, user="a", **{"pass": "a"})
    b = Client(port, user="b", **{"pass": "b"})
    c = Client(port, user="c", **{"pass": "c"})
    a.send("SUB req.> 1")
    b.send("SUB from_a.> 1", "SUB events.> 2", "SUB _INBOX.b.> 3")
    c.send("SUB private.> 1", "SUB ev.> 2", "SUB events.> 3")
    out = {k: v.sync() for k, v in (("a", a), ("b", b), ("c", c))}
    a.send("PUB events.x 1", "e", "PUB private.y 1", "p")
    out["a_publishes"] = a.sync()
    out["b_gets"], out["c_gets"] = b.sync(), c.sync()
    b.send("PUB events.local 1", "l")  # B's own events stay in B
    out["b_local"], out["c_after_b"] = b.sync(), c.sync()
    b.send("PUB time _INBOX.b.1 1", "?", "PUB time 1", "!")
    b.sync()
    request = a.sync()
    out["a_requests"] = [_normal(line) for line in request]
    reply = request[-2].split()[3]  # the mapped reply of the first request
    a.send(f"PUB {reply} 2", "ok", f"PUB {reply} 2", "no")  # singleton: one answer
    a.sync()
    out["b_answers"] = b.sync()
    for client in (a, b, c):
        client.close()
    return out


def _normal(line: str) -> str:
    """A mapped reply subject without its random tokens."""
    parts = line.split()
    return " ".join("_R_.<id>" if p.startswith("_R_.") else p for p in parts)


def test_exports_and_imports_cross_accounts_as_on_nats_server(tmp_path):
    conf = tmp_path / "server.conf"
    conf.write_text(CROSSING)
    with nats_server(conf) as (port, _):
        expected = crossing_sessions(port)
    assert expected["b_answers"] == ["MSG _INBOX.b.1 3 2 ok"]  # the scenario holds
    with gateway_with(conf) as gw:
        got = crossing_sessions(gw.port)
    assert got == expected


def test_an_import_its_exporter_does_not_allow_is_refused_by_both(tmp_path):
    conf = tmp_path / "server.conf"
    conf.write_text(CROSSING.replace('accounts: [C]', 'accounts: [A]'))
    checked = subprocess.run([find_nats_server(), "-c", str(conf), "-t"], capture_output=True,
                             text=True, timeout=30)
    assert checked.returncode != 0
    with pytest.raises(ServerConfigError, match="not authorized"):
        GatewayThread(None, GatewayOptions(port=0, config=str(conf))).start()



def _monitor_view(port: int, http_port: int) -> dict:
    import base64

    from tests.gateway import test_monitor

    # the gateway's monitor asks for a user's credentials (nats-server's asks for none)
    basic = {"Authorization": "Basic " + base64.b64encode(b"a:a").decode()}

    def get(port: int, path: str):
        return test_monitor.get(port, path, basic)

    a = Client(port, user="a", **{"pass": "a"})
    ro = Client(port, user="ro", **{"pass": "ro"})
    b = Client(port, user="b", **{"pass": "b-pass"})
    a.send("SUB x 1", "SUB y 2")
    for c in (a, ro, b):
        c.sync()
    listed = get(http_port, "/accountz")[1]["accounts"]
    detail = {acc: get(http_port, f"/accountz?acc={acc}")[1]["account_detail"]
              for acc in ("A", "B")}
    conns = get(http_port, "/connz?auth=1&subs=detail")[1]["connections"]
    for c in (a, ro, b):
        c.close()
    keys = ("client_connections", "jetstream_enabled", "name_tag")
    return {"accounts": sorted(listed),
            "detail": {acc: {k: d.get(k) for k in keys} for acc, d in detail.items()},
            "connections": sorted(
                (c.get("authorized_user"), c.get("account"), c.get("name_tag"),
                 sorted(s["subject"] for s in c.get("subscriptions_list_detail", [])))
                for c in conns)}


def test_monitoring_shows_accounts_and_users_as_nats_server(config_file):
    http_port = free_port()
    with nats_server(config_file, "-m", str(http_port)) as (port, _):
        _wait_listening(http_port)
        expected = _monitor_view(port, http_port)
    with gateway_with(config_file, http_port=0) as gw:
        got = _monitor_view(gw.port, gw.http_port)
    assert got == expected


if __name__ == "__main__":  # print nats-server's sessions (to read what the test compares)
    import sys
    import tempfile

    conf = Path(tempfile.mkdtemp()) / "server.conf"
    conf.write_text(CONFIG)
    json.dump(on_nats_server.__wrapped__(conf), sys.stdout, indent=1)
