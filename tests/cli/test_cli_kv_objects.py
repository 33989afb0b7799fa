"""`rayjet kv ...` and `rayjet object ...` on real buckets."""

from __future__ import annotations

import os


def test_kv_commands(cli, stream_name):
    bucket = stream_name
    created = cli.json("kv", "add", bucket, "--history", "5", "--storage", "memory")
    assert created["bucket"] == bucket and created["history"] == 5
    assert cli.json("kv", "put", bucket, "sue.color", "blue")["revision"] == 1
    assert "revision 2" in cli("kv", "put", bucket, "sue.color", "green").stdout
    cli("kv", "put", bucket, "bob.color", input="red", code=0)  # value from stdin
    assert cli.json("kv", "get", bucket, "sue.color")["data"] == "green"
    assert cli.json("kv", "get", bucket, "sue.color", "--revision", "1")["data"] == "blue"
    assert cli("kv", "get", bucket, "bob.color", "--raw").stdout == "red\n"
    assert cli.json("kv", "create", bucket, "sue.color", "x", code=1)["error"]["err_code"]
    assert cli.json("kv", "update", bucket, "sue.color", "teal", "2")["revision"] == 4
    assert cli.json("kv", "update", bucket, "sue.color", "x", "2", code=1)["error"][
        "err_code"] == 10071
    history = cli.json("kv", "history", bucket, "sue.color")
    assert [h["data"] for h in history] == ["blue", "green", "teal"]
    assert cli.json("kv", "keys", bucket) == ["bob.color", "sue.color"]
    assert cli.json("kv", "keys", bucket, "sue.*") == ["sue.color"]
    watched = cli.lines("kv", "watch", bucket, "--count", "2")
    assert {w["key"] for w in watched} == {"bob.color", "sue.color"}
    cli("kv", "del", bucket, "bob.color", "-f")
    assert cli.json("kv", "get", bucket, "bob.color", code=1)["error"]["code"] == 404
    assert bucket in cli.json("kv", "ls")
    assert cli.json("kv", "ls", bucket) == ["sue.color"]
    assert cli.json("kv", "status", bucket)["values"] >= 1
    cli("kv", "add", "bad.name", code=1)
    cli("kv", "add", bucket, "--history", "99", code=2)
    cli("kv", "rm", bucket, "-f")
    assert cli.json("kv", "status", bucket, code=1)["error"]["code"] == 404


def test_object_commands(cli, stream_name, tmp_path):
    bucket = stream_name
    assert cli.json("object", "add", bucket, "--storage", "memory")["bucket"] == bucket
    src = tmp_path / "big.bin"
    data = os.urandom(300_000)
    src.write_bytes(data)
    stored = cli.json("object", "put", bucket, src)
    assert stored["size"] == len(data) and stored["chunks"] >= 2
    out = cli("object", "put", bucket, src, "--name", "copy.bin").output
    assert "Stored copy.bin" in out and "300.0/300.0 kB" in out  # the progress bar
    target = tmp_path / "back.bin"
    got = cli.json("object", "get", bucket, "big.bin", "--output", target)
    assert got["size"] == len(data) and target.read_bytes() == data
    cli("object", "get", bucket, "big.bin", "--output", target, code=2)  # exists: --force
    cli("object", "get", bucket, "big.bin", "--output", target, "-f", "--no-progress")
    assert [i["name"] for i in cli.json("object", "ls", bucket)] == ["big.bin", "copy.bin"]
    assert "copy.bin" in cli("object", "ls", bucket).stdout
    assert bucket in cli.json("object", "ls")
    assert cli.json("object", "info", bucket, "big.bin")["digest"].startswith("SHA-256=")
    assert cli.json("object", "info", bucket)["bucket"] == bucket
    assert cli.json("object", "rm", bucket, "copy.bin", "-f")["deleted"] == "copy.bin"
    assert cli.json("object", "info", bucket, "copy.bin", code=1)["error"]["code"] == 404
    cli("object", "put", bucket, tmp_path / "nofile", code=2)
    cli("object", "rm", bucket, "-f")
    assert cli.json("object", "ls", bucket, code=1)["error"]["code"] == 404
