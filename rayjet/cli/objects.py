"""``rayjet object ...``: object store buckets (add, put, get, ls, info, rm, watch, seal,
status), with a progress bar for put and get."""

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from rayjet.api import ObjectMeta, ObjectStoreConfig, StorageType
from rayjet.cli import common as c
from rayjet.cli.streams import confirm
from rayjet.errors import TimeoutError as RayjetTimeout

app = typer.Typer(no_args_is_help=True)

Bucket = Annotated[str, typer.Argument(help="bucket name", show_default=False)]
Name = Annotated[str, typer.Argument(help="object name", show_default=False)]
Force = Annotated[bool, typer.Option("--force", "-f", help="do not ask for confirmation")]
NoProgress = Annotated[bool, typer.Option("--no-progress", help="no progress bar")]
PREFIX = "OBJ_"


@contextlib.contextmanager
def progress(label: str, total: int | None, enabled: bool) -> Iterator[Any]:
    """A rich progress bar on stderr; yields ``advance(n)``."""
    if not enabled:
        yield lambda _n: None
        return
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
                   TransferSpeedColumn(), TimeRemainingColumn(), console=c.err_console(),
                   transient=False)
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


class _Reading:
    """A file whose reads advance a progress bar (what ObjectStore.put reads from)."""

    def __init__(self, f: BinaryIO, advance: Any) -> None:
        self._f, self._advance = f, advance

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._advance(len(data))
        return data


class _Writing:
    """A file whose writes advance a progress bar (what ObjectStore.get writes into)."""

    def __init__(self, f: BinaryIO, advance: Any) -> None:
        self._f, self._advance = f, advance

    def write(self, data: bytes) -> int:
        self._advance(len(data))
        return self._f.write(data)


def info_dict(i: Any) -> dict[str, Any]:
    return i.to_dict()


def _show_info(i: Any, header: str | None = None) -> None:
    if c.wants_json():
        c.emit_json(info_dict(i))
        return
    rows = [("Name", i.name), ("Bucket", i.bucket), ("Description", i.description),
            ("Size", c.human_bytes(i.size)), ("Chunks", f"{i.chunks:,}"),
            ("Digest", i.digest), ("Modified", c.human_time(i.mtime) if i.mtime else None),
            ("Deleted", "true" if i.deleted else None),
            ("Link", f"{i.options.link.bucket}/{i.options.link.name or ''}"
             if i.options and i.options.link else None)]
    for k, v in (i.headers or {}).items():
        rows.append((f"Header {k}", v if isinstance(v, str) else ", ".join(v)))
    title = header or f"Object information for {i.bucket} > {i.name}"
    c.print_renderables(f"[bold]{c.escape(title)}[/]", c.kv_table(rows))


@c.command(app, "add")
def add(bucket: Bucket,
        ttl: Annotated[str | None, typer.Option("--ttl", help="how long objects live",
                                                show_default=False)] = None,
        replicas: Annotated[int, typer.Option("--replicas", min=1, max=5)] = 1,
        storage: Annotated[Literal["file", "memory"], typer.Option("--storage")] = "file",
        max_bucket_size: Annotated[str | None, typer.Option(
            "--max-bucket-size", help="bytes kept, e.g. 1GB", show_default=False)] = None,
        description: Annotated[str | None, typer.Option("--description",
                                                        show_default=False)] = None) -> None:
    """Create an object store bucket (stream OBJ_<bucket>)."""
    cfg = ObjectStoreConfig(
        bucket=bucket, replicas=replicas, storage=StorageType(storage), description=description,
        ttl=c.parse_age(ttl, "--ttl") or None if ttl else None,
        max_bytes=c.parse_size(max_bucket_size, "--max-bucket-size") if max_bucket_size
        else -1)
    obs = c.connect(gateway=True).create_object_store(cfg)
    _show_status(obs.status(), f"Object store {bucket} was created")


def _show_status(st: Any, header: str | None = None) -> None:
    if c.wants_json():
        c.emit_json({"bucket": st.bucket, "description": st.description, "ttl": st.ttl,
                     "storage": st.storage_type.value, "replicas": st.replicas,
                     "sealed": st.sealed, "size": st.size, "stream": st.stream_info})
        return
    rows = [("Bucket", st.bucket), ("Description", st.description),
            ("TTL", c.human_duration(st.ttl) if st.ttl else "unlimited"),
            ("Storage", st.storage_type.value.title()), ("Replicas", st.replicas),
            ("Sealed", str(st.sealed).lower()), ("Size", c.human_bytes(st.size)),
            ("Backing Stream", st.stream_info.config.name)]
    title = header or f"Information for Object Store {st.bucket}"
    c.print_renderables(f"[bold]{c.escape(title)}[/]", c.kv_table(rows, "Configuration:"))


@c.command(app, "status")
def status(bucket: Bucket) -> None:
    """A bucket's settings and size."""
    _show_status(c.connect(gateway=True).object_store(bucket).status())


@c.command(app, "put")
def put(bucket: Bucket,
        file: Annotated[Path, typer.Argument(help="the file to store", exists=True,
                                             dir_okay=False, show_default=False)],
        name: Annotated[str | None, typer.Option("--name", help="object name (default: the "
                                                 "file's name)", show_default=False)] = None,
        description: Annotated[str | None, typer.Option("--description",
                                                        show_default=False)] = None,
        no_progress: NoProgress = False) -> None:
    """Store a file as an object (replacing one of the same name once complete)."""
    obs = c.connect(gateway=True).object_store(bucket)
    meta = ObjectMeta(name=name or file.name, description=description)
    size = file.stat().st_size
    with file.open("rb") as f, progress(f"put {meta.name}", size,
                                        not (no_progress or c.wants_json())) as advance:
        info = obs.put(meta.name, _Reading(f, advance), meta=meta)
    _show_info(info, None if c.wants_json() else f"Stored {info.name} in {bucket}")


@c.command(app, "get")
def get(bucket: Bucket, name: Name,
        output: Annotated[Path | None, typer.Option("--output", "-O", help="write here "
                                                    "(default: the object's name in the "
                                                    "current directory)",
                                                    show_default=False)] = None,
        force: Force = False, no_progress: NoProgress = False) -> None:
    """Write an object to a file, checking its size and SHA-256 digest."""
    obs = c.connect(gateway=True).object_store(bucket)
    info = obs.info(name)
    target = output or Path(Path(name).name)
    if target.exists() and not force:
        c.usage_error(f"{str(target)!r} exists: pass --force to overwrite it, or --output")
    partial = target.with_name(target.name + ".partial")
    started = time.perf_counter()
    try:
        with partial.open("wb") as f, progress(f"get {name}", info.size,
                                               not (no_progress or c.wants_json())) as adv:
            obs.get(name, writeinto=_Writing(f, adv))
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    seconds = time.perf_counter() - started
    if c.wants_json():
        c.emit_json({"bucket": bucket, "name": name, "file": str(target), "size": info.size,
                     "digest": info.digest, "seconds": round(seconds, 4)})
    else:
        c.console().print(f"Wrote {c.human_bytes(info.size)} to {c.escape(target)} in "
                          f"{seconds:.2f}s")


@c.command(app, "info")
def info(bucket: Bucket, name: Annotated[str | None, typer.Argument(
        help="object name (default: the bucket's status)", show_default=False)] = None) -> None:
    """An object's size, chunks and digest (or the bucket's status)."""
    obs = c.connect(gateway=True).object_store(bucket)
    if name is None:
        _show_status(obs.status())
    else:
        _show_info(obs.info(name))


@c.command(app, "ls")
def ls(bucket: Annotated[str | None, typer.Argument(
        help="list this bucket's objects (default: list the buckets)", show_default=False)
        ] = None) -> None:
    """List object store buckets, or the objects of one bucket."""
    js = c.connect(gateway=True)
    if bucket is None:
        names = sorted(n[len(PREFIX):] for n in js.stream_names() if n.startswith(PREFIX))
        if c.wants_json():
            c.emit_json(names)
        elif not names:
            c.console().print("No Object Store buckets found")
        else:
            for n in names:
                typer.echo(n)
        return
    infos = sorted(js.object_store(bucket).list(ignore_deletes=True), key=lambda i: i.name)
    if c.wants_json():
        c.emit_json([info_dict(i) for i in infos])
        return
    if not infos:
        c.console().print(f"No objects in {c.escape(bucket)}")
        return
    rows = [(i.name, c.human_bytes(i.size), f"{i.chunks:,}",
             i.mtime.strftime("%Y-%m-%d %H:%M:%S") if i.mtime else "-") for i in infos]
    c.print_renderables(c.list_table(["Name", "Size", "Chunks", "Time"], rows,
                                     title=f"Bucket contents of {bucket}", right=[1, 2]))


@c.command(app, "rm")
def rm(bucket: Bucket,
       name: Annotated[str | None, typer.Argument(help="object name (default: delete the "
                                                  "whole bucket)", show_default=False)] = None,
       force: Force = False) -> None:
    """Delete an object, or the whole bucket."""
    js = c.connect(gateway=True)
    obs = js.object_store(bucket)
    if name is None:
        confirm(f"Really delete object store {bucket}?", force)
        js.delete_object_store(bucket)
        what: dict[str, Any] = {"deleted": bucket}
        text = f"Object store {bucket} was deleted"
    else:
        obs.info(name)
        confirm(f"Really delete object {bucket} > {name}?", force)
        obs.delete(name)
        what = {"bucket": bucket, "deleted": name}
        text = f"Deleted {bucket} > {name}"
    if c.wants_json():
        c.emit_json(what)
    else:
        typer.echo(text)


@c.command(app, "seal")
def seal(bucket: Bucket, force: Force = False) -> None:
    """Make a bucket read-only for good."""
    obs = c.connect(gateway=True).object_store(bucket)
    confirm(f"Really seal object store {bucket}?", force)
    obs.seal()
    if c.wants_json():
        c.emit_json({"bucket": bucket, "sealed": True})
    else:
        typer.echo(f"Object store {bucket} was sealed")


@c.command(app, "watch")
def watch(bucket: Bucket,
          count: Annotated[int | None, typer.Option("--count", min=1, help="stop after this "
                                                    "many changes", show_default=False)] = None,
          wait: Annotated[float | None, typer.Option("--wait", min=0.01, help="stop after "
                                                     "this many idle seconds",
                                                     show_default=False)] = None,
          updates_only: Annotated[bool, typer.Option("--updates-only",
                                                     help="changes only")] = False) -> None:
    """Current objects, then every change, until --count, --wait idle seconds or Ctrl-C."""
    watcher = c.connect(gateway=True).object_store(bucket).watch(updates_only=updates_only)
    got = 0
    idle_since = time.monotonic()
    try:
        while count is None or got < count:
            try:
                i = watcher.updates(timeout=1.0)
            except RayjetTimeout:
                if wait is not None and time.monotonic() - idle_since >= wait:
                    break
                continue
            idle_since = time.monotonic()
            if i is None:
                continue
            got += 1
            if c.wants_json():
                c.emit_line(info_dict(i))
            else:
                op = "DEL" if i.deleted else "PUT"
                when = i.mtime.strftime("%H:%M:%S") if i.mtime else "-"
                c.console().print(f"[{when}] [bold]{op}[/] {c.escape(i.bucket)} > "
                                  f"{c.escape(i.name)}: {c.human_bytes(i.size)}")
    finally:
        watcher.stop()
