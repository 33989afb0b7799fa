"""Accounts and users from a configuration, and who each CONNECT proves to be."""

from __future__ import annotations

import bcrypt
import nkeys as reference_nkeys
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.auth import GLOBAL, ServerAuth, parse
from rayjet.auth.nkeys import KeyPair, decode_public, is_public_key, verify
from rayjet.errors import ServerConfigError

HASH = bcrypt.hashpw(b"hunter2", bcrypt.gensalt(4)).decode()


def auth(text: str) -> ServerAuth:
    return ServerAuth.from_config(parse(text, env={}))


def test_no_users_means_no_authentication():
    a = auth("port: 4222")
    assert not a.auth_required
    assert a.authenticate({}, None).account == GLOBAL
    assert a.jetstream_of(GLOBAL) is not None  # no accounts: $G has JetStream


def test_accounts_users_passwords_and_defaults():
    user = KeyPair.create("U")
    a = auth(f"""
accounts {{
  TEAM_A: {{
    users: [
      {{user: alice, password: "{HASH}"}}
      {{user: reader, password: r, permissions: {{subscribe: "orders.>"}}}}
    ]
    default_permissions: {{publish: "orders.>"}}
    jetstream: {{max_mem: 1G, max_file: 10G, max_streams: 5, disk_max_stream_bytes: 1M}}
  }}
  TEAM_B: {{ users: [ {{nkey: {user.public_key}}} ], exports: [{{stream: "events.>"}}] }}
  TEAM_C: {{ imports: [{{stream: {{account: TEAM_B, subject: "events.>"}}, prefix: b}}] }}
}}
no_auth_user: reader
""")
    alice = a.authenticate({"user": "alice", "pass": "hunter2"}, None)
    assert alice.account == "TEAM_A" and alice.user == "alice"
    assert alice.permissions.can_publish("orders.1")  # the account's default permissions
    assert not alice.permissions.can_publish("other")
    assert a.authenticate({"user": "alice", "pass": "wrong"}, None) is None
    assert a.authenticate({"user": "nobody", "pass": "x"}, None) is None
    anon = a.authenticate({}, None)
    assert anon.user == "reader" and anon.permissions.can_subscribe("orders.x")
    nonce = b"a-nonce"
    ident = a.authenticate({"nkey": user.public_key, "sig": user.sign(nonce)}, nonce)
    assert ident.account == "TEAM_B"
    assert a.authenticate({"nkey": user.public_key, "sig": user.sign(b"other")}, nonce) is None
    js = a.jetstream_of("TEAM_A")
    assert (js.max_memory, js.max_storage, js.max_streams) == (10**9, 10 * 10**9, 5)  # G: 10^9 as nats-server reads it
    assert js.storage_max_stream_bytes == 10**6 and not js.tiers  # tiers come from JWTs
    assert a.jetstream_of("TEAM_B") is None and a.jetstream_of(GLOBAL) is None
    assert a.accounts["TEAM_C"].imports[0].prefix == "b"
    assert "$SYS" in a.accounts


def test_token_and_single_user():
    a = auth("authorization { token: s3cret }")
    assert a.authenticate({"auth_token": "s3cret"}, None).account == GLOBAL
    assert a.authenticate({"auth_token": "nope"}, None) is None
    assert a.authenticate({}, None) is None
    b = auth(f'authorization {{ user: u, password: "{HASH}" }}')
    assert b.authenticate({"user": "u", "pass": "hunter2"}, None) is not None
    assert b.authenticate({"user": "u", "pass": HASH}, None) is None


@pytest.mark.parametrize(("text", "match"), [
    ("accounts { A: { users: [{user: x}] } }\naccounts2: 1\nno_auth_user: y", "no_auth_user"),
    ("accounts { A: { users: [{user: x}] }, B: { users: [{user: x}] } }", "duplicate user"),
    ("accounts { A: { users: [{nkey: UNOTAKEY}] } }", "not a valid public nkey"),
    ("accounts { A: { users: [{password: p}] } }", "needs a user"),
    ("accounts { $G: {} }", "reserved"),
    ("accounts { A: { imports: [{stream: {account: Z, subject: x}}] } }", "not defined"),
    ("accounts { A: { exports: [{stream: x, service: y}] } }", "not both"),
    ("accounts { A: { jetstream: maybe } }", "enabled, disabled"),
    ("accounts { A: { color: red } }", "unknown field"),
    ("authorization { token: t, users: [{user: a, password: b}] }", "token and users"),
])
def test_bad_configurations_are_refused_clearly(text, match):
    with pytest.raises(ServerConfigError, match=match):
        auth(text)


def test_nkeys_interoperate_with_the_reference_library():
    ours = KeyPair.create("U")
    theirs = reference_nkeys.from_seed(ours.seed.encode())
    assert theirs.public_key.decode() == ours.public_key
    import base64

    signed = base64.b64encode(theirs.sign(b"nonce")).decode()  # nats-py sends this form
    assert verify(ours.public_key, b"nonce", signed)
    assert not verify(ours.public_key, b"other", signed)
    assert is_public_key(ours.public_key) and not is_public_key(ours.public_key, "A")
    broken = ours.public_key[:-1] + ("A" if ours.public_key[-1] != "A" else "B")
    assert decode_public(broken) is None
    assert not verify(ours.public_key, b"nonce", "not base64 !!")


def test_the_documented_configuration_reads():
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "gateway.md").read_text()
    (block,) = re.findall(r"^```conf\n(.*?)^```", page, re.M | re.S)
    a = ServerAuth.from_config(parse(block, env={}))
    reader = a.authenticate({"user": "reader", "pass": "r"}, None)
    assert reader.account == "ORDERS"
    assert reader.permissions.can_publish("$JS.ACK.ORDERS.reader.1.2.3.4.5")
    assert not reader.permissions.can_publish("orders.new")
    assert a.jetstream_of("ORDERS") is not None and a.jetstream_of("AUDIT") is None


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=40),
                    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5),
                                                                           st.integers(),
                                                                           max_size=2))


@settings(max_examples=300, deadline=None)
@given(connect=st.dictionaries(st.sampled_from(["user", "pass", "auth_token", "nkey", "sig",
                                                "jwt", "name"]), _VALUES, max_size=5),
       nonce=st.one_of(st.none(), st.binary(max_size=30)))
def test_a_strangers_connect_is_refused_or_accepted_never_an_exception(connect, nonce):
    for a in (_FUZZ_AUTH, _FUZZ_NO_AUTH_USER):
        ident = a.authenticate(connect, nonce)
        assert ident is None or ident.account in a.accounts


_FUZZ_KEY = KeyPair.create("U")
_FUZZ_AUTH = auth(f"""accounts {{ A: {{ users: [ {{user: u, password: "{HASH}"}},
                                            {{nkey: {_FUZZ_KEY.public_key}}} ] }} }}""")
_FUZZ_NO_AUTH_USER = auth("authorization { users: [ {user: anon, password: x} ] }\n"
                          "no_auth_user: anon")
