"""Shared CLI plumbing: global options on every command, the connection, output helpers."""

import base64
import contextvars
import dataclasses
import functools
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from enum import Enum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from rayjet.api.duration import format_duration, parse_duration
from rayjet.errors import APIError, ServiceUnavailableError


@dataclasses.dataclass
class State:
    """Options of this invocation (root options, overridden by a command's own)."""

    address: str | None = None
    data_dir: str | None = None
    timeout: float = 10.0
    json: bool = False
    js: Any = None


_CTX: contextvars.ContextVar[Any] = contextvars.ContextVar("rayjet_cli_ctx", default=None)


def context() -> Any:
    """The typer context of the running command."""
    ctx = _CTX.get()
    if ctx is None:
        raise RuntimeError("no rayjet command is running")
    return ctx


def state() -> State:
    root = context().find_root()
    if root.obj is None:
        root.obj = State()
    return root.obj


# -- global options on every command --------------------------------------------------------
_GLOBAL = [
    inspect.Parameter("json_", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        bool | None, typer.Option("--json", help="print JSON for scripts", show_default=False)]),
    inspect.Parameter("address", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        str | None, typer.Option("--address", help="Ray cluster: 'auto' or host:port "
                                 "(default: $RAY_ADDRESS, else auto)", show_default=False)]),
    inspect.Parameter("timeout", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        float | None, typer.Option("--timeout", min=0.001, help="seconds to wait for answers",
                                   show_default=False)]),
]
_CTX_PARAM = inspect.Parameter("rayjet_ctx_", inspect.Parameter.KEYWORD_ONLY,
                               annotation=typer.Context)
_GLOBAL_NAMES = {p.name for p in _GLOBAL} | {_CTX_PARAM.name}


def option(name: str, annotation: Any, *decls: str, help: str, **kwargs: Any
           ) -> inspect.Parameter:
    """A keyword option for :func:`command`'s ``extra`` (flags shared by several commands)."""
    kwargs.setdefault("show_default", False)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[annotation, typer.Option(*decls, help=help,
                                                                           **kwargs)])


def command(app: typer.Typer, name: str, *, extra: list[inspect.Parameter] | None = None,
            collect: str = "flags", **kwargs: Any) -> Callable:
    """``@app.command(name)`` plus ``--json``/``--address``/``--timeout`` and error handling.

    ``extra`` options are added to the command and handed to it as one dict, ``collect``."""
    extra = list(extra or ())
    extra_names = {p.name for p in extra}

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kw: Any) -> Any:
            _CTX.set(kw.pop(_CTX_PARAM.name))
            st = state()
            if extra:
                kw[collect] = {n: kw.pop(n) for n in extra_names}
            json_, address, timeout = kw.pop("json_"), kw.pop("address"), kw.pop("timeout")
            if json_:
                st.json = True
            if address is not None:
                st.address = address
            if timeout is not None:
                st.timeout = timeout
            return run(fn, *args, **kw)

        params = [p for p in sig.parameters.values()
                  if p.name not in _GLOBAL_NAMES and not (extra and p.name == collect)]
        params = [*params, *extra, *_GLOBAL, _CTX_PARAM]
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__
        app.command(name, **kwargs)(wrapper)
        return fn

    return decorate


def run(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call a command body; rayjet errors become a message with err_code and hint, exit 1."""
    try:
        return fn(*args, **kwargs)
    except APIError as err:
        fail(err)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except Exception as exc:  # noqa: BLE001 - anything else still gets a message and exit 1
        if type(exc).__module__.startswith("typer."):  # Exit, Abort, usage errors
            raise
        from rayjet.errors import ServerError

        fail(ServerError(f"{type(exc).__name__}: {exc}", hint=""))


def fail(err: APIError) -> None:
    st = state()
    if st.json:
        emit_json({"error": {"code": err.code, "err_code": err.err_code,
                             "description": err.description, "hint": err.hint or None}})
    console = err_console()
    console.print(f"[bold red]rayjet error:[/] {escape(err.description)} "
                  f"(err_code={err.err_code}, code={err.code})", highlight=False)
    if err.hint:
        console.print(f"[yellow]hint:[/] {escape(err.hint)}", highlight=False)
    raise typer.Exit(1)


def usage_error(message: str) -> None:
    """A bad or missing flag: print the usage error and exit 2."""
    ctx = context()
    console = err_console()
    console.print(escape(ctx.get_usage()), highlight=False)
    console.print(f"Try '{escape(ctx.command_path)} --help' for help.", highlight=False)
    console.print(f"[bold red]Error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(2)


# -- the connection -------------------------------------------------------------------------
def connect(*, gateway: bool = False) -> Any:
    """The connection of this invocation, opened on first use and closed at exit.

    ``gateway``: the command only needs what a NATS gateway serves (streams, consumers,
    publishes), so when a rayjet gateway runs (``$RAYJET_GATEWAY``, else 127.0.0.1:4222) and
    no --address was given, the command goes through it: a few NATS requests instead of a
    Ray driver start. Otherwise, inside a process that already runs Ray (the tests), with no
    --address, that session is reused; else --address, $RAY_ADDRESS or "auto" must name a
    running cluster: a local Ray is never started implicitly (that is `rayjet server start`).
    """
    st = state()
    if st.js is not None:
        return st.js
    if gateway and st.address is None and not _ray_running():
        from rayjet.remote.connection import find_gateway
        from rayjet.remote.jetstream import GatewayJetStream

        found = find_gateway(st.timeout)
        if found is not None:
            st.js = GatewayJetStream(found)
            context().find_root().call_on_close(_closer(st))
            return st.js
    import ray  # here, not at the top: commands through a gateway never load Ray

    import rayjet
    from rayjet.client.ray_join import NO_CLUSTER_HINT, resolve_address

    address = st.address
    if not (address is None and ray.is_initialized()):
        address = address or os.environ.get("RAY_ADDRESS") or "auto"
        resolve_address(address, st.timeout)  # a clear error at once where nothing listens
    try:
        st.js = rayjet.connect(address, data_dir=st.data_dir, timeout=st.timeout,
                               ray_init_kwargs={"logging_level": logging.ERROR})
    except ServiceUnavailableError as err:
        raise ServiceUnavailableError(err.description, hint=NO_CLUSTER_HINT) from None
    context().find_root().call_on_close(_closer(st))
    return st.js


def _ray_running() -> bool:
    """Does this process already run a Ray session (without importing Ray to find out)?"""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _closer(st: State) -> Callable[[], None]:
    def close() -> None:
        if st.js is not None:
            st.js.close()
            st.js = None

    return close


# -- output ---------------------------------------------------------------------------------
def console() -> Console:
    return _console(False)


def err_console() -> Console:
    return _console(True)


def _console(stderr: bool) -> Console:
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else int(os.environ.get("COLUMNS", "160"))
    return Console(stderr=stderr, width=width, soft_wrap=False, highlight=False)


def escape(text: Any) -> str:
    from rich.markup import escape as _escape

    return _escape(str(text))


def jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    return value


def emit_json(value: Any) -> None:
    typer.echo(json.dumps(jsonable(value), indent=2, sort_keys=False, default=str))


def emit_line(value: Any) -> None:
    """One JSON document per line (streams of messages)."""
    typer.echo(json.dumps(jsonable(value), default=str))


def wants_json() -> bool:
    return state().json


def kv_table(rows: Iterable[tuple[str, Any]], title: str | None = None) -> Table:
    """The ``nats stream info`` look: right-aligned labels, a colon, the values."""
    table = Table.grid(padding=(0, 1))
    table.add_column(justify="right", style="bold")
    table.add_column()
    for label, value in rows:
        if value is None or value == "":
            continue
        table.add_row(f"{label}:", escape(value))
    if title:
        outer = Table.grid()
        outer.add_row(f"[bold underline]{escape(title)}[/]")
        outer.add_row("")
        outer.add_row(table)
        return outer
    return table


def list_table(headers: Iterable[str], rows: Iterable[Iterable[Any]], title: str | None = None,
               right: Iterable[int] = ()) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    right = set(right)
    for i, h in enumerate(headers):
        table.add_column(h, justify="right" if i in right else "left", overflow="fold")
    for row in rows:
        table.add_row(*(escape(c) for c in row))
    return table


def print_renderables(*items: Any) -> None:
    out = console()
    for i, item in enumerate(items):
        if i:
            out.print()
        out.print(item)


# -- value formatting and parsing -------------------------------------------------------------
def human_bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    if n < 0:
        return "unlimited"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def human_count(n: int | None) -> str:
    if n is None:
        return "-"
    return "unlimited" if n < 0 else f"{n:,}"


def human_duration(seconds: float | None) -> str:
    if not seconds:
        return "0s" if seconds == 0 else "-"
    if seconds >= 86400:
        days = seconds / 86400
        return f"{days:g}d"
    return format_duration(round(seconds, 6))


def human_time(ts: datetime | None) -> str:
    if ts is None:
        return "never"
    ago = (datetime.now(tz=UTC) - ts).total_seconds()
    stamp = ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp} UTC ({human_ago(ago)} ago)" if ago >= 0 else f"{stamp} UTC"


def human_ago(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours}h"
    return f"{hours}h{minutes}m" if hours else f"{minutes}m{secs}s"


_SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1 << 20, "MB": 1 << 20,
               "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40,
               "TB": 1 << 40, "TIB": 1 << 40}


def parse_size(text: str, flag: str) -> int:
    """``"1024"``, ``"512KB"``, ``"1GiB"`` or ``-1`` (unlimited) to bytes."""
    s = str(text).strip().upper().replace(" ", "")
    if s in ("-1", "UNLIMITED"):
        return -1
    num = s.rstrip("KMGTIB")
    unit = s[len(num):]
    try:
        value = float(num)
    except ValueError:
        value = None
    if value is None or unit not in _SIZE_UNITS or value < 0:
        usage_error(f"invalid {flag} {text!r}: use a byte count such as 1024, 512KB, 1GB or -1")
    return int(value * _SIZE_UNITS[unit])


def parse_count(text: str, flag: str) -> int:
    s = str(text).strip().lower()
    if s in ("-1", "unlimited"):
        return -1
    try:
        value = int(s.replace("_", "").replace(",", ""))
    except ValueError:
        value = -2
    if value < 0:
        usage_error(f"invalid {flag} {text!r}: use a whole number, or -1 for unlimited")
    return value


def parse_age(text: str, flag: str) -> float:
    """Durations as nats takes them: ``"1h"``, ``"30m"``, ``"2d"``, ``"1w"``, ``"1y"``,
    seconds, or ``-1``/``0``/``unlimited`` for none."""
    s = str(text).strip().lower()
    if s in ("-1", "0", "unlimited", "forever", ""):
        return 0.0
    extra = {"d": 86400.0, "w": 7 * 86400.0, "y": 365 * 86400.0}
    try:
        if s[-1] in extra and s[:-1].replace(".", "", 1).isdigit():
            return float(s[:-1]) * extra[s[-1]]
        if s.replace(".", "", 1).isdigit():
            return float(s)
        value = parse_duration(s)
        if value < 0:
            raise ValueError(s)
        return value
    except ValueError:
        usage_error(f"invalid {flag} {text!r}: use a duration such as 30s, 10m, 1h, 2d or 1y")
    return 0.0


def parse_headers(values: Iterable[str] | None) -> dict[str, str]:
    """``-H key:value`` pairs (nats' form) to a dict."""
    out: dict[str, str] = {}
    for item in values or ():
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            usage_error(f"invalid header {item!r}: use -H key:value")
        out[key.strip()] = value.strip()
    return out


def split_list(values: Iterable[str] | None) -> list[str]:
    """Repeatable flags that also take comma- or space-separated lists."""
    out: list[str] = []
    for v in values or ():
        out += [p for p in v.replace(",", " ").split() if p]
    return out


def stdin_is_tty() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def message_dict(subject: str, seq: int | None, data: bytes, headers: dict | None,
                 ts: datetime | None, **extra: Any) -> dict[str, Any]:
    """A message as JSON: data as text when it is UTF-8, else base64 (``encoding``)."""
    out: dict[str, Any] = {"subject": subject, "seq": seq}
    try:
        out["data"] = data.decode("utf-8")
    except UnicodeDecodeError:
        out["data"] = base64.b64encode(data).decode()
        out["encoding"] = "base64"
    out["headers"] = dict(headers or {}) or None
    out["time"] = ts.isoformat() if ts else None
    out.update(extra)
    return out


def show_data(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(data)} bytes of binary data>"
