"""The CLI tests run `rayjet` in-process (typer's runner) on the session's local Ray."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rayjet.cli.main import app
from tests.cluster.conftest import js, stream_name  # noqa: F401


class Cli:
    """``cli("stream", "ls")`` runs the command; ``cli.json(...)`` adds --json and parses."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: object, input: str | None = None, code: int | None = 0):
        result = self.runner.invoke(app, [str(a) for a in args], input=input)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        if code is not None:
            assert result.exit_code == code, (args, result.exit_code, result.output)
        return result

    def json(self, *args: object, code: int | None = 0, input: str | None = None):
        result = self(*args, "--json", code=code, input=input)
        return json.loads(result.stdout)

    def lines(self, *args: object) -> list[dict]:
        """Commands that print one JSON document per line (messages)."""
        result = self(*args, "--json")
        return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


@pytest.fixture
def cli(js, monkeypatch):  # noqa: F811 - the fixture imported above
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAYJET_DATA_DIR", str(js.data_dir))
    # the width tables print at without a terminal (pytest-xdist's workers set COLUMNS=80,
    # which truncates the long stream names these tests look for)
    monkeypatch.setenv("COLUMNS", "160")
    return Cli()
