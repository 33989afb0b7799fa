"""Decentralised JWT users (operator mode), compared with nats-server reading the same
configuration: a trusted operator, a preloaded account, users whose JWTs that account
signed; the client signs the nonce with its user nkey."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from rayjet.auth.jwt import JWTError, decode, issue
from rayjet.auth.nkeys import KeyPair
from tests.gateway.test_gateway_auth import gateway_with, nats_server

OPERATOR, ACCOUNT, STRANGER = KeyPair.create("O"), KeyPair.create("A"), KeyPair.create("A")
USER, LIMITED = KeyPair.create("U"), KeyPair.create("U")


def _user_jwt(user: KeyPair, account: KeyPair, nats: dict | None = None) -> str:
    return issue({"sub": user.public_key, "name": "u",
                  "nats": {"type": "user", "version": 2, "pub": {}, "sub": {},
                           "subs": -1, "data": -1, "payload": -1, **(nats or {})}}, account)


def _config(directory: Path) -> Path:
    op_jwt = issue({"sub": OPERATOR.public_key, "name": "op",
                    "nats": {"type": "operator", "version": 2}}, OPERATOR)
    acc_jwt = issue({"sub": ACCOUNT.public_key, "name": "acc",
                     "nats": {"type": "account", "version": 2,
                              "limits": {"subs": -1, "conn": -1, "leaf": -1, "imports": -1,
                                         "exports": -1, "data": -1, "payload": -1,
                                         "wildcards": True}}}, OPERATOR)
    (directory / "op.jwt").write_text(op_jwt)
    conf = directory / "server.conf"
    conf.write_text(f'operator: "{directory}/op.jwt"\nresolver: MEMORY\n'
                    f'resolver_preload: {{\n  {ACCOUNT.public_key}: "{acc_jwt}"\n}}\n')
    return conf


def _session(port: int, user_jwt: str | None, signer: KeyPair | None) -> list[str]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    f = sock.makefile("rb")
    info = json.loads(f.readline()[5:])
    connect = {"verbose": False, "pedantic": False, "protocol": 1}
    if user_jwt is not None:
        connect["jwt"] = user_jwt
    if signer is not None:
        connect["sig"] = signer.sign(info["nonce"].encode())
    sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\n"
                 b"SUB open 1\r\nSUB secret 2\r\nPUB secret 1\r\nx\r\nPING\r\n")
    out = []
    while True:
        line = f.readline().decode().strip()
        if not line:
            out.append("<closed>")
            break
        if line == "PONG":
            break
        if not line.startswith("INFO"):
            out.append(line)
    sock.close()
    return out


def _all(port: int) -> dict[str, list[str]]:
    limited = _user_jwt(LIMITED, ACCOUNT, {"pub": {"deny": ["secret"]},
                                           "sub": {"deny": ["secret"]}})
    return {
        "user": _session(port, _user_jwt(USER, ACCOUNT), USER),
        "limited": _session(port, limited, LIMITED),
        "wrong_signer": _session(port, _user_jwt(USER, ACCOUNT), LIMITED),
        "unknown_account": _session(port, _user_jwt(USER, STRANGER), USER),
        "no_jwt": _session(port, None, None),
    }


def test_jwt_users_as_on_nats_server(tmp_path):
    conf = _config(tmp_path)
    with nats_server(conf) as (port, _):
        expected = _all(port)
    assert expected["user"] == ["MSG secret 2 1", "x"]  # connected, hears itself
    assert "Authorization" in expected["unknown_account"][0]
    with gateway_with(conf) as gw:
        got = _all(gw.port)
    assert got == expected


def test_tokens_that_are_not_their_issuers_are_refused():
    token = _user_jwt(USER, ACCOUNT)
    assert decode(token).subject == USER.public_key
    head, body, sig = token.split(".")
    other = _user_jwt(LIMITED, ACCOUNT).split(".")
    for bad in (f"{head}.{other[1]}.{sig}", f"{head}.{body}.{other[2]}", "a.b", 7,
                f"{head}.{body}.{sig}x"):
        with pytest.raises(JWTError):
            decode(bad)
