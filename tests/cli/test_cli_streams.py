"""`rayjet stream ...`: flags, --config JSON, interactive add, errors and output."""

from __future__ import annotations

import json

from rayjet.cli import common


def test_add_info_edit_ls_report_rm(cli, stream_name):
    out = cli("stream", "add", stream_name, "--subjects", f"{stream_name}.*", "--storage",
              "memory", "--max-msgs", "100", "--max-age", "1h", "--dupe-window", "1m",
              "--allow-rollup", "--deny-delete", "--max-bytes", "1MB", "--description", "d")
    assert f"Stream {stream_name} was created" in out.stdout
    assert "Configuration:" in out.stdout and "Maximum Messages: 100" in out.stdout
    info = cli.json("stream", "info", stream_name)
    cfg = info["config"]
    assert cfg["subjects"] == [f"{stream_name}.*"] and cfg["storage"] == "memory"
    assert (cfg["max_msgs"], cfg["max_age"], cfg["duplicate_window"]) == (
        100, 3600 * 10**9, 60 * 10**9)
    assert cfg["allow_rollup_hdrs"] and cfg["deny_delete"] and cfg["max_bytes"] == 1 << 20
    assert info["state"]["messages"] == 0

    edited = cli.json("stream", "edit", stream_name, "--max-msgs", "200", "--no-allow-rollup")
    assert edited["config"]["max_msgs"] == 200 and not edited["config"]["allow_rollup_hdrs"]
    human = cli("stream", "edit", stream_name, "--max-msgs-per-subject", "5", "-f").stdout
    assert "+ max_msgs_per_subject: 5" in human and "was updated" in human
    cli("stream", "edit", stream_name, "--max-msgs", "200", code=2)  # nothing changes

    assert stream_name in cli.json("stream", "ls", "--names")
    listed = cli.json("stream", "ls", "--subject", f"{stream_name}.x")
    assert [i["config"]["name"] for i in listed] == [stream_name]
    assert stream_name in cli("stream", "ls").stdout
    (row,) = [r for r in cli.json("stream", "report") if r["stream"] == stream_name]
    assert (row["replicas"], row["storage"], row["leader"]) == (1, "memory", "r0")
    assert stream_name in cli("stream", "report").stdout

    cli("stream", "rm", stream_name, code=2)  # no terminal: asks for --force
    assert "was deleted" in cli("stream", "rm", stream_name, "-f").stdout
    gone = cli("stream", "info", stream_name, code=1)
    assert "err_code=10059" in gone.output and "hint:" in gone.output


def test_config_file_takes_a_nats_json_definition(cli, stream_name, tmp_path):
    # seed 004's "foo-write-west", with the name, storage, replicas and placement of this test
    definition = {
        "name": stream_name, "subjects": ["foo.west.>"], "retention": "limits",
        "max_consumers": -1, "max_msgs_per_subject": -1, "max_msgs": -1, "max_bytes": -1,
        "max_age": 3600000000000, "max_msg_size": -1, "storage": "memory", "discard": "old",
        "num_replicas": 1, "duplicate_window": 120000000000, "sealed": False,
        "deny_delete": False, "deny_purge": False, "allow_rollup_hdrs": False,
        "allow_direct": False, "mirror_direct": False}
    path = tmp_path / "stream.json"
    path.write_text(json.dumps(definition))
    info = cli.json("stream", "add", "--config", path)
    cfg = info["config"]
    assert cfg["name"] == stream_name and cfg["subjects"] == ["foo.west.>"]
    assert cfg["max_age"] == 3600000000000 and cfg["duplicate_window"] == 120000000000
    # the same file again: the stream exists with the same config (nats answers the same)
    path.write_text(json.dumps({**definition, "subjects": ["foo.east.>"]}))
    err = cli.json("stream", "edit", stream_name, "--config", path)
    assert err["config"]["subjects"] == ["foo.east.>"]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "err_code=" in cli("stream", "add", "--config", bad, code=1).output
    cli("stream", "add", "--config", tmp_path / "missing.json", code=2)
    cli("stream", "rm", stream_name, "-f")


def test_interactive_add(cli, stream_name, monkeypatch):
    answers = [f"{stream_name}.>", "memory", "1", "limits", "old", "1000", "-1", "10MB", "1d",
               "-1", "2m", "y", "n", "y"]
    cli("stream", "add", stream_name, "-i", input="\n".join(answers) + "\n")
    cfg = cli.json("stream", "info", stream_name)["config"]
    assert cfg["subjects"] == [f"{stream_name}.>"] and cfg["storage"] == "memory"
    assert (cfg["max_msgs"], cfg["max_bytes"], cfg["max_age"]) == (1000, 10 << 20, 86400 * 10**9)
    assert cfg["allow_rollup_hdrs"] and cfg["deny_delete"] and not cfg["deny_purge"]
    cli("stream", "rm", stream_name, "-f")


def test_add_asks_in_a_terminal_and_names_missing_flags_otherwise(cli, monkeypatch):
    assert "missing --subjects" in cli("stream", "add", "NOTTY", code=2).output
    assert "missing stream NAME" in cli("stream", "add", code=2).output
    monkeypatch.setattr(common, "stdin_is_tty", lambda: True)
    # in a terminal every unset value is asked for; a bad answer is asked again
    out = cli("stream", "add", "TTY", input="TTY.*\ntape\nfile\n", code=1)
    assert "Subjects" in out.output and "'tape' is not one of" in out.output


def test_bad_flags_exit_2(cli):
    for args in (["stream", "add", "X", "--replicas", "9"],
                 ["stream", "add", "X", "--storage", "tape"],
                 ["stream", "add", "X", "-s", "x", "--max-bytes", "lots"],
                 ["stream", "add", "X", "-s", "x", "--max-age", "soon"],
                 ["stream", "add", "X", "-s", "x", "--metadata", "novalue"],
                 ["stream", "info"], ["stream", "nope"], ["stream", "info", "X", "--bogus"],
                 ["stream", "purge", "X", "--seq", "1", "--keep", "1", "-f"],
                 ["stream", "get", "X"]):
        cli(*args, code=2)


def test_errors_carry_err_code_and_hint(cli):
    err = cli.json("stream", "info", "NOSUCHSTREAM", code=1)["error"]
    assert err["err_code"] == 10059 and err["code"] == 404 and err["hint"]
    out = cli("stream", "add", "BADSUBJ", "--subjects", "a..b", code=1).output
    assert "invalid subject 'a..b'" in out and "err_code=" in out
    out = cli("stream", "view", "NOSUCHSTREAM", code=1).output
    assert "err_code=10059" in out


def test_no_cluster_is_a_clear_error(cli):
    out = cli("stream", "ls", "--address", "127.0.0.1:1", code=1).output
    assert "no Ray cluster" in out and "rayjet server start" in out


def test_step_down_moves_the_leader(cli, stream_name):
    cli("stream", "add", stream_name, "--subjects", f"{stream_name}.*", "--replicas", "3",
        "--storage", "memory")
    before = cli.json("stream", "info", stream_name)["cluster"]["leader"]
    moved = cli.json("stream", "step-down", stream_name)
    assert moved["leader"] not in (None, before)
    assert "is now led by" in cli("stream", "step-down", stream_name).stdout
    cli("stream", "add", stream_name + "ONE", "--subjects", f"{stream_name}ONE.*",
        "--storage", "memory")
    assert "keeps leading" in cli("stream", "step-down", stream_name + "ONE").stdout
    gone = cli("stream", "step-down", stream_name + "NOPE", code=1)
    assert "err_code=10059" in gone.output
    for name in (stream_name, stream_name + "ONE"):
        cli("stream", "rm", name, "-f")


def test_peer_remove_replaces_a_replica(cli, stream_name):
    cli("stream", "add", stream_name, "--subjects", f"{stream_name}.*", "--replicas", "3",
        "--storage", "memory")
    cluster = cli.json("stream", "info", stream_name)["cluster"]
    follower = cluster["replicas"][0]["name"]
    out = cli.json("stream", "peer-remove", stream_name, follower)
    assert out["removed"] == follower and follower not in out["replicas"]
    assert len(out["replicas"]) == 3
    missing = cli("stream", "peer-remove", stream_name, follower, code=1)
    assert "err_code=10040" in missing.output
    cli("stream", "rm", stream_name, "-f")
