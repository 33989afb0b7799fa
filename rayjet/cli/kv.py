"""``rayjet kv ...``: key-value buckets (add, put, get, create, update, del, purge, history,
keys, watch, ls, status, rm)."""

import sys
import time
from typing import Annotated, Any, Literal

import typer

from rayjet.api import KeyValueConfig, StorageType
from rayjet.cli import common as c
from rayjet.cli.streams import confirm
from rayjet.errors import TimeoutError as RayjetTimeout

app = typer.Typer(no_args_is_help=True)

Bucket = Annotated[str, typer.Argument(help="bucket name", show_default=False)]
Key = Annotated[str, typer.Argument(help="key", show_default=False)]
Value = Annotated[str | None, typer.Argument(help="value (default: read stdin)",
                                             show_default=False)]
Force = Annotated[bool, typer.Option("--force", "-f", help="do not ask for confirmation")]
PREFIX = "KV_"


def _value(value: str | None) -> bytes:
    if value is not None:
        return value.encode()
    if c.stdin_is_tty():
        c.usage_error("missing VALUE (or pipe it on stdin)")
    return sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()


def entry_dict(e: Any) -> dict[str, Any]:
    out = c.message_dict(e.key, e.revision, e.value or b"", None, e.created,
                         bucket=e.bucket, operation=e.operation.value, delta=e.delta)
    out["key"] = out.pop("subject")
    out["revision"] = out.pop("seq")
    out.pop("headers")
    return out


def _print_entry(e: Any) -> None:
    out = c.console()
    when = e.created.strftime("%Y-%m-%d %H:%M:%S") if e.created else "-"
    op = "" if e.operation.value == "PUT" else f" {e.operation.value}"
    out.print(f"[bold]{c.escape(e.bucket)} > {c.escape(e.key)}[/] revision: {e.revision} "
              f"created @ {when}{op}")
    if e.value:
        out.print()
        out.print(c.escape(c.show_data(e.value)))
    out.print()


@c.command(app, "add")
def add(bucket: Bucket,
        history: Annotated[int, typer.Option("--history", min=1, max=64,
                                             help="values kept per key")] = 1,
        ttl: Annotated[str | None, typer.Option("--ttl", help="how long values live, e.g. 1h",
                                                show_default=False)] = None,
        replicas: Annotated[int, typer.Option("--replicas", min=1, max=5)] = 1,
        storage: Annotated[Literal["file", "memory"], typer.Option("--storage")] = "file",
        max_value_size: Annotated[str | None, typer.Option(
            "--max-value-size", help="largest value, e.g. 1MB", show_default=False)] = None,
        max_bucket_size: Annotated[str | None, typer.Option(
            "--max-bucket-size", help="bytes kept, e.g. 1GB", show_default=False)] = None,
        description: Annotated[str | None, typer.Option("--description",
                                                        show_default=False)] = None) -> None:
    """Create a bucket (stream KV_<bucket>)."""
    cfg = KeyValueConfig(
        bucket=bucket, history=history, replicas=replicas, storage=StorageType(storage),
        ttl=c.parse_age(ttl, "--ttl") or None if ttl else None, description=description,
        max_value_size=c.parse_size(max_value_size, "--max-value-size") if max_value_size
        else -1,
        max_bytes=c.parse_size(max_bucket_size, "--max-bucket-size") if max_bucket_size
        else -1)
    kv = c.connect(gateway=True).create_key_value(cfg)
    _show_status(kv.status(), f"Bucket {bucket} was created")


def _show_status(st: Any, header: str | None = None) -> None:
    if c.wants_json():
        c.emit_json({"bucket": st.bucket, "values": st.values, "history": st.history,
                     "ttl": st.ttl, "bytes": st.bytes, "replicas": st.replicas,
                     "backing_store": st.backing_store, "stream": st.stream_info})
        return
    info = st.stream_info
    rows = [("Bucket", st.bucket), ("History", st.history),
            ("TTL", c.human_duration(st.ttl) if st.ttl else "unlimited"),
            ("Values", f"{st.values:,}"), ("Size", c.human_bytes(st.bytes)),
            ("Replicas", st.replicas), ("Storage", info.config.storage.value.title()),
            ("Maximum Value Size", c.human_bytes(info.config.max_msg_size)),
            ("Maximum Bucket Size", c.human_bytes(info.config.max_bytes)),
            ("Backing Stream", info.config.name)]
    title = header or f"Information for Key-Value Store Bucket {st.bucket}"
    c.print_renderables(f"[bold]{c.escape(title)}[/]", c.kv_table(rows, "Configuration:"))


@c.command(app, "status")
def status(bucket: Bucket) -> None:
    """A bucket's settings and size."""
    _show_status(c.connect(gateway=True).key_value(bucket).status())


@c.command(app, "ls")
def ls(bucket: Annotated[str | None, typer.Argument(
        help="list this bucket's keys (default: list the buckets)", show_default=False)] = None
       ) -> None:
    """List buckets, or the keys of one bucket."""
    js = c.connect(gateway=True)
    if bucket:
        _print_names(sorted(js.key_value(bucket).keys()), f"No keys in {bucket}")
        return
    names = sorted(n[len(PREFIX):] for n in js.stream_names() if n.startswith(PREFIX))
    _print_names(names, "No Key-Value buckets found")


def _print_names(names: list[str], empty: str) -> None:
    if c.wants_json():
        c.emit_json(names)
    elif not names:
        c.console().print(empty)
    else:
        for n in names:
            typer.echo(n)


@c.command(app, "keys")
def keys(bucket: Bucket,
         filters: Annotated[list[str] | None, typer.Argument(
             help="key patterns with * and >", show_default=False)] = None) -> None:
    """The keys that have a value."""
    kv = c.connect(gateway=True).key_value(bucket)
    _print_names(sorted(kv.keys(filters or None)), f"No keys in {bucket}")


@c.command(app, "put")
def put(bucket: Bucket, key: Key, value: Value = None) -> None:
    """Set a key's value."""
    rev = c.connect(gateway=True).key_value(bucket).put(key, _value(value))
    _revision("put", bucket, key, rev)


def _revision(op: str, bucket: str, key: str, rev: int) -> None:
    if c.wants_json():
        c.emit_json({"bucket": bucket, "key": key, "revision": rev, "operation": op})
    else:
        typer.echo(f"{op} {key}: revision {rev}")


@c.command(app, "create")
def create(bucket: Bucket, key: Key, value: Value = None) -> None:
    """Set a key only when it has no value."""
    rev = c.connect(gateway=True).key_value(bucket).create(key, _value(value))
    _revision("create", bucket, key, rev)


@c.command(app, "update")
def update(bucket: Bucket, key: Key, value: Annotated[str, typer.Argument(help="value")],
           revision: Annotated[int, typer.Argument(min=0, help="the revision it must have")]
           ) -> None:
    """Set a key only when its last revision is REVISION (compare and set)."""
    rev = c.connect(gateway=True).key_value(bucket).update(key, value.encode(), last=revision)
    _revision("update", bucket, key, rev)


@c.command(app, "get")
def get(bucket: Bucket, key: Key,
        revision: Annotated[int | None, typer.Option("--revision", min=1, show_default=False)
                            ] = None,
        raw: Annotated[bool, typer.Option("--raw", help="the value only")] = False) -> None:
    """A key's value (the latest, or --revision)."""
    e = c.connect(gateway=True).key_value(bucket).get(key, revision=revision)
    if c.wants_json():
        c.emit_json(entry_dict(e))
    elif raw:
        typer.get_binary_stream("stdout").write((e.value or b"") + b"\n")
    else:
        _print_entry(e)


@c.command(app, "del")
def delete(bucket: Bucket, key: Key, force: Force = False) -> None:
    """Delete a key (its history stays)."""
    confirm(f"Really delete key {key}?", force)
    c.connect(gateway=True).key_value(bucket).delete(key)
    _done("deleted", bucket, key)


@c.command(app, "purge")
def purge(bucket: Bucket, key: Key, force: Force = False) -> None:
    """Delete a key and its history."""
    confirm(f"Really purge key {key}?", force)
    c.connect(gateway=True).key_value(bucket).purge(key)
    _done("purged", bucket, key)


def _done(what: str, bucket: str, key: str) -> None:
    if c.wants_json():
        c.emit_json({"bucket": bucket, "key": key, what: True})
    else:
        typer.echo(f"{what} {key}")


@c.command(app, "history")
def history(bucket: Bucket, key: Key) -> None:
    """Every kept revision of a key."""
    entries = c.connect(gateway=True).key_value(bucket).history(key)
    if c.wants_json():
        c.emit_json([entry_dict(e) for e in entries])
        return
    rows = [(e.key, str(e.revision), e.operation.value,
             e.created.strftime("%Y-%m-%d %H:%M:%S") if e.created else "-",
             c.human_bytes(len(e.value or b"")), c.show_data(e.value or b"")[:60])
            for e in entries]
    c.print_renderables(c.list_table(["Key", "Revision", "Op", "Created", "Length", "Value"],
                                     rows, title=f"History for {bucket} > {key}", right=[1]))


@c.command(app, "watch")
def watch(bucket: Bucket,
          keys_: Annotated[str, typer.Argument(help="key pattern", metavar="KEYS")] = ">",
          count: Annotated[int | None, typer.Option("--count", min=1, help="stop after this "
                                                    "many entries", show_default=False)] = None,
          wait: Annotated[float | None, typer.Option("--wait", min=0.01, help="stop after "
                                                     "this many idle seconds",
                                                     show_default=False)] = None,
          history_: Annotated[bool, typer.Option("--history", help="every kept revision "
                                                 "first")] = False,
          updates_only: Annotated[bool, typer.Option("--updates-only", help="no current "
                                                     "values, changes only")] = False) -> None:
    """Current values, then every change, until --count, --wait idle seconds or Ctrl-C."""
    kv = c.connect(gateway=True).key_value(bucket)
    watcher = kv.watch(keys_, include_history=history_, updates_only=updates_only)
    got = 0
    idle_since = time.monotonic()
    try:
        while count is None or got < count:
            try:
                e = watcher.updates(timeout=1.0)
            except RayjetTimeout:
                if wait is not None and time.monotonic() - idle_since >= wait:
                    break
                continue
            idle_since = time.monotonic()
            if e is None:  # the end of the initial values
                continue
            got += 1
            if c.wants_json():
                c.emit_line(entry_dict(e))
            else:
                when = e.created.strftime("%H:%M:%S") if e.created else "-"
                value = "" if e.operation.value != "PUT" else c.show_data(e.value or b"")
                c.console().print(f"[{when}] [bold]{e.operation.value}[/] "
                                  f"{c.escape(e.bucket)} > {c.escape(e.key)}: {c.escape(value)}")
    finally:
        watcher.stop()


@c.command(app, "rm")
def rm(bucket: Bucket, force: Force = False) -> None:
    """Delete a bucket and everything in it."""
    js = c.connect(gateway=True)
    js.key_value(bucket)
    confirm(f"Really delete bucket {bucket}?", force)
    js.delete_key_value(bucket)
    if c.wants_json():
        c.emit_json({"deleted": bucket})
    else:
        typer.echo(f"Bucket {bucket} was deleted")
