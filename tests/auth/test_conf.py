"""nats-server's configuration syntax: what each form reads as, and clear errors for what
cannot be read (never another exception, whatever the bytes)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.auth.conf import ConfigSyntaxError, parse, parse_file
from rayjet.errors import ServerConfigError


def test_separators_comments_and_scalars():
    doc = parse("""
# a comment
port: 4222          // another
host = "0.0.0.0"
name rayjet-1; big: 2m, small 1KB
listen 127.0.0.1:4222
ratio: 1.5
neg -3
yes_value: YES
when 2024-01-02T03:04:05Z
""")
    assert doc == {"port": 4222, "host": "0.0.0.0", "name": "rayjet-1", "big": 2_000_000,
                   "small": 1024, "listen": "127.0.0.1:4222", "ratio": 1.5, "neg": -3,
                   "yes_value": True,
                   "when": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)}


@pytest.mark.parametrize(("text", "value"), [
    ("1k", 1000), ("1kb", 1024), ("1Ki", 1024), ("1KiB", 1024), ("3M", 3_000_000),
    ("1gb", 2**30), ("2t", 2 * 10**12), ("1h", "1h"), ("30s", "30s"), ("1_000", "1_000"),
    ("off", False), ("On", True), ("no", False), ("10.0.0.1", "10.0.0.1"),
    ("nats://h:4222", "nats://h:4222"), ("a\\tb", "a\tb"),
])
def test_bare_values(text, value):
    assert parse(f"v: {text}")["v"] == value


def test_strings_blocks_and_escapes():
    doc = parse('a: "x\\ty\\n\\"q\\" \\x41"\nb: \'raw \\t\'\nc (\nline 1\n  line 2\n)\n')
    assert doc == {"a": 'x\ty\n"q" A', "b": "raw \\t", "c": "\nline 1\n  line 2"}


def test_maps_arrays_and_json():
    doc = parse("""
accounts {
  A: { users = [ {user: a, password: "p"}, {user: b, password: q} ], jetstream: enabled }
  B {
    users: [
      {user: c, password: c}   # newline-separated entries
      {user: d, password: d},
    ]
  }
}
""")
    assert doc["accounts"]["A"]["users"][1] == {"user": "b", "password": "q"}
    assert [u["user"] for u in doc["accounts"]["B"]["users"]] == ["c", "d"]
    assert parse('{"a": {"b": [1, 2], "c": "d"}, "e": true}') == {
        "a": {"b": [1, 2], "c": "d"}, "e": True}


def test_variables_bcrypt_and_environment():
    doc = parse("""
PASS: "s3cret"
hashed: $2a$11$abcdefghijk
authorization { user: a, password: $PASS }
from_env: $RJ_TEST_VALUE
""", env={"RJ_TEST_VALUE": "12k"})
    assert doc["authorization"]["password"] == "s3cret"
    assert doc["hashed"] == "$2a$11$abcdefghijk"
    assert doc["from_env"] == 12_000
    with pytest.raises(ConfigSyntaxError, match="NOPE.*can not be found"):
        parse("a: $NOPE", env={})
    with pytest.raises(ConfigSyntaxError, match="cycle"):
        parse("a: $X", env={"X": "$X"})


def test_includes_are_relative_to_the_including_file(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "users.conf").write_text("authorization { token: t0k }\n")
    main = tmp_path / "server.conf"
    main.write_text("port: 4333\ninclude ./conf.d/users.conf\n")
    assert parse_file(main) == {"port": 4333, "authorization": {"token": "t0k"}}
    (tmp_path / "loop.conf").write_text("include loop.conf\n")
    with pytest.raises(ConfigSyntaxError, match="too deep"):
        parse_file(tmp_path / "loop.conf")
    with pytest.raises(ServerConfigError, match="cannot be read"):
        parse_file(tmp_path / "missing.conf")


@pytest.mark.parametrize("text", [
    "a: {", "a: [1, 2", "a: \"open", "a:\n1", "a: .5", "a: -x", "a: (\nno end", "}",
    "a: 1 2", "a: \"\\q\"", "a: [1,,2]", "a: 99999999999999999999",
])
def test_what_cannot_be_read_names_the_line(text):
    with pytest.raises(ConfigSyntaxError, match="line"):
        parse(text)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab1$:={}[]()\"'#/\\,;. \n\t-kx")), max_size=60))
def test_strangers_text_reads_or_fails_clearly(text):
    try:
        doc = parse(text, env={})
    except ConfigSyntaxError:
        return
    assert isinstance(doc, dict)
