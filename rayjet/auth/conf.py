"""nats-server's configuration syntax, read into plain Python values.

The syntax operators already write for nats-server: ``key value``, ``key: value`` or
``key = value``; maps ``{}`` and arrays ``[]`` whose entries end at a newline, ``,`` or
``;``; ``#`` and ``//`` comments; double-quoted strings with ``\\t \\n \\r \\" \\\\ \\xHH``
escapes, single-quoted raw strings, ``( ... )`` blocks ending with ``)`` alone on a line,
and unquoted strings; integers with size suffixes (``k`` = 1000, ``kb``/``ki``/``kib`` =
1024, up to ``e``/``eb``), floats, booleans (``true false yes no on off``), Zulu datetimes;
``$name`` variables (a key of an enclosing map, else an environment variable, itself read
as a value; ``$2a$``, ``$2b$``, ``$2y$`` are bcrypt hashes, kept as they are); and
``include <file>`` (relative to the including file), merged where it stands.

A value that cannot be read raises :class:`ConfigSyntaxError` naming the file and line.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rayjet.errors import ServerConfigError

MAX_DEPTH = 64  # nesting of maps, arrays and includes: a file is not a stack overflow
_SIZE_SUFFIX = {"": 1, "k": 10**3, "kb": 2**10, "ki": 2**10, "kib": 2**10,
                "m": 10**6, "mb": 2**20, "mi": 2**20, "mib": 2**20,
                "g": 10**9, "gb": 2**30, "gi": 2**30, "gib": 2**30,
                "t": 10**12, "tb": 2**40, "ti": 2**40, "tib": 2**40,
                "p": 10**15, "pb": 2**50, "pi": 2**50, "pib": 2**50,
                "e": 10**18, "eb": 2**60, "ei": 2**60, "eib": 2**60}
_INT = re.compile(r"-?\d+([kKmMgGtTpPeE][bBiI]{0,2})?")
_FLOAT = re.compile(r"-?\d+\.\d+")
_DATETIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_BCRYPT = ("2a$", "2b$", "2y$")
_INT64 = 2**63


class ConfigSyntaxError(ServerConfigError):
    """The configuration text cannot be read (file and line in the description)."""


def parse(text: str, *, path: str | Path | None = None,
          env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The configuration ``text`` as a dict (``path``: where includes are looked up from
    and what errors name)."""
    return _Reader(text, Path(path) if path else None,
                   os.environ if env is None else env, depth=0).top()


def parse_file(path: str | Path, *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ServerConfigError(f"configuration file {p} cannot be read: {exc}") from None
    return parse(text, path=p, env=env)


def used_variables(doc: dict[str, Any]) -> set[str]:
    """The top-level keys that were referenced as ``$name`` (not options of their own)."""
    return set(getattr(doc, "used", ()))


class _Doc(dict):
    """A map that remembers which of its keys were used as variables."""

    used: set[str]

    def __init__(self) -> None:
        super().__init__()
        self.used = set()


class _Reader:
    def __init__(self, text: str, path: Path | None, env: Mapping[str, str], depth: int,
                 scopes: list[_Doc] | None = None) -> None:
        self.s = text
        self.i = 0
        self.line = 1
        self.path = path
        self.env = env
        self.depth = depth
        self.scopes: list[_Doc] = scopes if scopes is not None else []
        self.env_seen: set[str] = set()

    # -- errors and characters ------------------------------------------------------------
    def fail(self, what: str) -> ConfigSyntaxError:
        where = f"{self.path}:{self.line}" if self.path else f"line {self.line}"
        return ConfigSyntaxError(f"configuration parse error at {where}: {what}")

    def peek(self, ahead: int = 0) -> str:
        j = self.i + ahead
        return self.s[j] if j < len(self.s) else ""

    def take(self) -> str:
        c = self.peek()
        self.i += 1
        if c == "\n":
            self.line += 1
        return c

    def skip_blank(self, newlines: bool) -> None:
        """Spaces and tabs (and newlines and comments when ``newlines``)."""
        while True:
            c = self.peek()
            if c in (" ", "\t", "\r"):
                self.take()
            elif newlines and c == "\n":
                self.take()
            elif newlines and (c == "#" or (c == "/" and self.peek(1) == "/")):
                self.skip_comment()
            else:
                return

    def skip_comment(self) -> None:
        while self.peek() not in ("\n", ""):
            self.take()

    # -- maps -----------------------------------------------------------------------------
    def top(self) -> dict[str, Any]:
        doc = _Doc()
        self.skip_blank(newlines=True)
        if self.peek() == "{":  # the whole file in braces, as a JSON document is
            self.take()
            self.entries(doc, closing="}")
            self.skip_blank(newlines=True)
            if self.peek():
                raise self.fail(f"unexpected {self.peek()!r} after the closing '}}'")
        else:
            self.entries(doc, closing="")
        return doc

    def entries(self, doc: _Doc, closing: str) -> None:
        """Key/value entries into ``doc`` up to ``closing`` ('}' or the end)."""
        self.scopes.append(doc)
        try:
            while True:
                self.skip_blank(newlines=True)
                c = self.peek()
                if c in (",", ";"):
                    self.take()
                    continue
                if c == "":
                    if closing:
                        raise self.fail(f"unexpected end of file: '{closing}' missing")
                    return
                if c == closing:
                    self.take()
                    return
                if c in "}]":
                    raise self.fail(f"unexpected '{c}'")
                self.entry(doc)
                self.entry_end(closing)
        finally:
            self.scopes.pop()

    def entry_end(self, closing: str) -> None:
        self.skip_blank(newlines=False)
        c = self.peek()
        if c == "#" or (c == "/" and self.peek(1) == "/"):
            self.skip_comment()
            c = self.peek()
        if c in ("\n", ",", ";", ""):
            if c:
                self.take()
            return
        if closing and c == closing:
            return
        raise self.fail(f"expected the end of an entry, found {c!r}")

    def entry(self, doc: _Doc) -> None:
        key = self.key()
        self.skip_blank(newlines=False)
        if key == "include" and self.peek() not in ("=", ":"):
            self.include(doc)
            return
        if self.peek() in ("=", ":"):
            self.take()
            self.skip_blank(newlines=False)
        if self.peek() in ("\n", ""):
            raise self.fail(f"expected a value for {key!r} but found the end of the line")
        doc[key] = self.value()

    def key(self) -> str:
        c = self.peek()
        if c in ("\"", "'"):
            self.take()
            out = []
            while self.peek() != c:
                if self.peek() in ("", "\n"):
                    raise self.fail("unterminated quoted key")
                out.append(self.take())
            self.take()
            return "".join(out)
        start = self.i
        while self.peek() not in ("", " ", "\t", "\r", "\n", "=", ":", "{", "[", "}", ",", ";"):
            self.take()
        if self.i == start:
            raise self.fail(f"expected a key, found {c!r}")
        return self.s[start:self.i]

    def include(self, doc: _Doc) -> None:
        c = self.peek()
        if c in ("\"", "'"):
            name = self.quoted(raw=True) if c == "'" else self.quoted(raw=False)
        else:
            start = self.i
            while self.peek() not in ("", " ", "\t", "\r", "\n", ",", ";", "}"):
                self.take()
            name = self.s[start:self.i]
        if not name:
            raise self.fail("include needs a file name")
        if self.depth >= MAX_DEPTH:
            raise self.fail("includes nested too deep")
        base = self.path.parent if self.path else Path.cwd()
        target = base / name
        try:
            text = target.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise self.fail(f"include {name!r} cannot be read: {exc}") from None
        sub = _Reader(text, target, self.env, self.depth + 1, scopes=list(self.scopes))
        inner = sub.top()
        doc.update(inner)
        doc.used |= inner.used

    # -- values ---------------------------------------------------------------------------
    def value(self) -> Any:
        c = self.peek()
        if c == "[":
            return self.array()
        if c == "{":
            self.take()
            self.nest()
            inner = _Doc()
            self.entries(inner, closing="}")
            self.depth -= 1
            return dict(inner)
        if c == "\"":
            return self.quoted(raw=False)
        if c == "'":
            return self.quoted(raw=True)
        if c == "(":
            return self.block()
        if c == ".":
            raise self.fail("floats must start with a digit")
        return self.bare()

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail("values nested too deep")

    def array(self) -> list[Any]:
        self.take()
        self.nest()
        out: list[Any] = []
        while True:
            self.skip_blank(newlines=True)
            c = self.peek()
            if c == "]":
                self.take()
                self.depth -= 1
                return out
            if c == "":
                raise self.fail("unexpected end of file: ']' missing")
            if c == ",":
                raise self.fail("unexpected ',' in an array")
            out.append(self.value())
            self.skip_blank(newlines=False)
            c = self.peek()
            if c == "#" or (c == "/" and self.peek(1) == "/"):
                self.skip_comment()
                c = self.peek()
            if c in (",", "\n"):
                self.take()
            elif c != "]":
                raise self.fail(f"expected ',' or ']' in an array, found {c!r}")

    def quoted(self, raw: bool) -> str:
        quote = self.take()
        out: list[str] = []
        while True:
            c = self.take()
            if c == "":
                raise self.fail("unexpected end of file in a quoted string")
            if c == quote:
                return "".join(out)
            if c == "\\" and not raw:
                out.append(self.escape())
            else:
                out.append(c)

    def escape(self) -> str:
        c = self.take()
        simple = {"t": "\t", "n": "\n", "r": "\r", "\"": "\"", "\\": "\\"}
        if c in simple:
            return simple[c]
        if c == "x":
            pair = self.take() + self.take()
            try:
                return bytes.fromhex(pair).decode("latin-1")
            except ValueError:
                raise self.fail(f"expected two hexadecimal digits after '\\x', "
                                f"found {pair!r}") from None
        raise self.fail(f"invalid escape character {c!r}: use \\xXX, \\t, \\n, \\r, \\\", "
                        f"\\\\")

    def block(self) -> str:
        self.take()
        start = self.i
        while True:
            c = self.take()
            if c == "":
                raise self.fail("unexpected end of file in a ( ... ) block")
            if c == "\n" and self.peek() == ")" and self.peek(1) in ("\n", ""):
                text = self.s[start:self.i - 1]
                self.take()
                return text

    def bare(self) -> Any:
        """An unquoted value: a number, boolean, datetime, variable or string."""
        start = self.i
        out: list[str] = []
        while True:
            c = self.peek()
            if c in ("", "\n", " ", "\t", "\r", ";", ",", "]", "}", "'"):
                break
            self.take()
            out.append(self.escape() if c == "\\" else c)
        text = "".join(out)
        escaped = "\\" in self.s[start:self.i]
        if not text:
            raise self.fail(f"expected a value, found {self.peek()!r}")
        if escaped:
            return text
        return self.typed(text)

    def typed(self, text: str) -> Any:
        if _INT.fullmatch(text):
            digits = re.match(r"-?\d+", text).group()
            num = int(digits) * _SIZE_SUFFIX[text[len(digits):].lower()]
            if not -_INT64 <= num < _INT64:
                raise self.fail(f"integer {text!r} is out of range")
            return num
        if _FLOAT.fullmatch(text):
            return float(text)
        if _DATETIME.fullmatch(text):
            try:
                return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(
                    tzinfo=dt.UTC)
            except ValueError:
                raise self.fail(f"expected a Zulu datetime, found {text!r}") from None
        if text.lower() in _BOOLS:
            return _BOOLS[text.lower()]
        if text.startswith("-") and not re.match(r"-\d", text):
            raise self.fail(f"expected a digit after '-' in {text!r}")
        if text.startswith("$"):
            return self.variable(text[1:])
        return text

    def variable(self, name: str) -> Any:
        if name.startswith(_BCRYPT):
            return "$" + name
        for scope in reversed(self.scopes):
            if name in scope:
                scope.used.add(name)
                return scope[name]
        if name in self.env and name not in self.env_seen:
            sub = _Reader(f"v={self.env[name]}", self.path, self.env, self.depth + 1)
            sub.env_seen = self.env_seen | {name}
            return sub.top()["v"]
        if name in self.env_seen:
            raise self.fail(f"variable reference cycle for {name!r}")
        raise self.fail(f"variable reference for {name!r} can not be found")
