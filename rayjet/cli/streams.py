"""``rayjet stream ...``: add, edit, info, ls, rm, step-down, peer-remove, purge, view,
get, rmm, report, backup, restore."""

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from rayjet.api import (
    DiscardPolicy,
    Placement,
    RePublish,
    RetentionPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamSource,
    SubjectTransform,
)
from rayjet.api.duration import parse_duration
from rayjet.cli import common as c
from rayjet.errors import InvalidConfigError, NotFoundError

app = typer.Typer(no_args_is_help=True)

RETENTIONS = {"limits": RetentionPolicy.LIMITS, "interest": RetentionPolicy.INTEREST,
              "workq": RetentionPolicy.WORK_QUEUE, "work": RetentionPolicy.WORK_QUEUE,
              "workqueue": RetentionPolicy.WORK_QUEUE}

# the flags of `nats stream add` that map to StreamConfig (shared by add and edit)
FLAGS = [
    c.option("subjects", list[str] | None, "--subjects", "-s",
             help="subjects the stream captures (repeat or comma-separate)"),
    c.option("description", str | None, "--description", help="a description"),
    c.option("storage", Literal["file", "memory"] | None, "--storage",
             help="file or memory"),
    c.option("replicas", int | None, "--replicas", "-R", min=1, max=5,
             help="replicas of each message (1..5)"),
    c.option("retention", Literal["limits", "interest", "workq", "work", "workqueue"] | None,
             "--retention",
             help="limits, interest or workq"),
    c.option("discard", Literal["old", "new"] | None, "--discard",
             help="what to do when full: old or new"),
    c.option("discard_per_subject", bool | None, "--discard-per-subject/--no-discard-per-subject",
             help="discard new per subject (with --discard new and --max-msgs-per-subject)"),
    c.option("max_msgs", str | None, "--max-msgs", help="messages kept (-1 unlimited)"),
    c.option("max_msgs_per_subject", str | None, "--max-msgs-per-subject",
             help="messages kept per subject (-1 unlimited)"),
    c.option("max_bytes", str | None, "--max-bytes", help="bytes kept, e.g. 1GB (-1 unlimited)"),
    c.option("max_age", str | None, "--max-age", help="age of the oldest message, e.g. 1h, 1d"),
    c.option("max_msg_size", str | None, "--max-msg-size", help="largest message, e.g. 1MB"),
    c.option("max_consumers", str | None, "--max-consumers", help="consumers (-1 unlimited)"),
    c.option("dupe_window", str | None, "--dupe-window",
             help="duplicate tracking window, e.g. 2m"),
    c.option("tags", list[str] | None, "--tag", help="placement tag (repeatable)"),
    c.option("cluster", str | None, "--cluster", help="placement cluster"),
    c.option("allow_rollup", bool | None, "--allow-rollup/--no-allow-rollup",
             help="allow Nats-Rollup headers"),
    c.option("deny_delete", bool | None, "--deny-delete/--allow-delete",
             help="refuse message deletes"),
    c.option("deny_purge", bool | None, "--deny-purge/--allow-purge", help="refuse purges"),
    c.option("allow_direct", bool | None, "--allow-direct/--no-allow-direct",
             help="direct gets from any replica"),
    c.option("mirror_direct", bool | None, "--allow-mirror-direct/--no-allow-mirror-direct",
             help="direct gets from mirrors"),
    c.option("ack", bool | None, "--ack/--no-ack", help="acknowledge publishes"),
    c.option("allow_msg_ttl", bool | None, "--allow-msg-ttl/--no-allow-msg-ttl",
             help="per-message TTLs (Nats-TTL)"),
    c.option("marker_ttl", str | None, "--marker-ttl",
             help="keep subject delete markers this long, e.g. 1m"),
    c.option("allow_counter", bool | None, "--allow-counter/--no-allow-counter",
             help="counter stream (Nats-Incr)"),
    c.option("allow_batch", bool | None, "--allow-batch/--no-allow-batch",
             help="atomic batch publishing"),
    c.option("allow_schedules", bool | None, "--allow-schedules/--no-allow-schedules",
             help="message schedules (Nats-Schedule)"),
    c.option("compression", Literal["none", "s2"] | None, "--compression",
             help="none or s2"),
    c.option("first_seq", int | None, "--first-sequence", min=0, help="first sequence"),
    c.option("metadata", list[str] | None, "--metadata", help="key=value (repeatable)"),
    c.option("mirror", str | None, "--mirror", help="mirror this stream"),
    c.option("sources", list[str] | None, "--source", help="source this stream (repeatable)"),
    c.option("transform_src", str | None, "--transform-source",
             help="ingest subject transform source"),
    c.option("transform_dest", str | None, "--transform-destination",
             help="ingest subject transform destination"),
    c.option("republish_src", str | None, "--republish-source", help="republish source"),
    c.option("republish_dest", str | None, "--republish-destination",
             help="republish destination"),
    c.option("republish_headers", bool | None, "--republish-headers/--no-republish-headers",
             help="republish headers only"),
    c.option("sync_interval", str | None, "--sync-interval",
             help="fsync interval, e.g. 2m, or 'always' (rayjet)"),
]

# what `add` asks for when run in a terminal without flags: (flag, question, default, kind)
PROMPTS = [
    ("subjects", "Subjects", None, "list"),
    ("storage", "Storage", "file", ("file", "memory")),
    ("replicas", "Replication", "1", ("1", "2", "3", "4", "5")),
    ("retention", "Retention Policy", "limits", ("limits", "interest", "workq")),
    ("discard", "Discard Policy", "old", ("old", "new")),
    ("max_msgs", "Stream Messages Limit", "-1", str),
    ("max_msgs_per_subject", "Per Subject Messages Limit", "-1", str),
    ("max_bytes", "Total Stream Size", "-1", str),
    ("max_age", "Message TTL", "-1", str),
    ("max_msg_size", "Max Message Size", "-1", str),
    ("dupe_window", "Duplicate tracking time window", "2m", str),
    ("allow_rollup", "Allow message Roll-ups", False, bool),
    ("deny_delete", "Allow message deletion", True, "allow"),
    ("deny_purge", "Allow purging subjects or the entire stream", True, "allow"),
]


def apply_flags(cfg: StreamConfig, flags: dict[str, Any]) -> StreamConfig:
    """The config with every given flag applied (None = not given)."""
    f = {k: v for k, v in flags.items() if v is not None and v != []}
    ch: dict[str, Any] = {}
    if "subjects" in f:
        ch["subjects"] = tuple(c.split_list(f["subjects"]))
    for key in ("description", "deny_delete", "deny_purge", "allow_direct", "mirror_direct",
                "allow_msg_ttl", "first_seq"):
        if key in f:
            ch[key] = f[key]
    simple = {"allow_rollup": "allow_rollup_hdrs", "allow_counter": "allow_msg_counter",
              "allow_batch": "allow_atomic_publish", "allow_schedules": "allow_msg_schedules",
              "discard_per_subject": "discard_new_per_subject"}
    for flag, field in simple.items():
        if flag in f:
            ch[field] = f[flag]
    if "ack" in f:
        ch["no_ack"] = not f["ack"]
    if "storage" in f:
        ch["storage"] = StorageType(f["storage"])
    if "replicas" in f:
        ch["num_replicas"] = f["replicas"]
    if "retention" in f:
        ch["retention"] = RETENTIONS[f["retention"]]
    if "discard" in f:
        ch["discard"] = DiscardPolicy(f["discard"])
    if "compression" in f:
        ch["compression"] = StoreCompression(f["compression"])
    for key in ("max_msgs", "max_msgs_per_subject", "max_consumers"):
        if key in f:
            ch[key] = c.parse_count(f[key], "--" + key.replace("_", "-"))
    for key in ("max_bytes", "max_msg_size"):
        if key in f:
            ch[key] = c.parse_size(f[key], "--" + key.replace("_", "-"))
    if "max_age" in f:
        ch["max_age"] = c.parse_age(f["max_age"], "--max-age")
    if "dupe_window" in f:
        ch["duplicate_window"] = c.parse_age(f["dupe_window"], "--dupe-window")
    if "marker_ttl" in f:
        ch["subject_delete_marker_ttl"] = c.parse_age(f["marker_ttl"], "--marker-ttl")
    if "tags" in f or "cluster" in f:
        old = cfg.placement or Placement()
        ch["placement"] = Placement(
            cluster=f.get("cluster", old.cluster),
            tags=tuple(c.split_list(f["tags"])) if "tags" in f else old.tags)
    if "metadata" in f:
        meta = dict(cfg.metadata)
        for item in f["metadata"]:
            key, sep, value = item.partition("=")
            if not sep or not key:
                c.usage_error(f"invalid --metadata {item!r}: use key=value")
            meta[key] = value
        ch["metadata"] = meta
    if "mirror" in f:
        ch["mirror"] = StreamSource(name=f["mirror"])
    if "sources" in f:
        ch["sources"] = tuple(StreamSource(name=s) for s in c.split_list(f["sources"]))
    if "transform_src" in f or "transform_dest" in f:
        ch["subject_transform"] = SubjectTransform(src=f.get("transform_src", ""),
                                                   dest=f.get("transform_dest", ""))
    if "republish_dest" in f or "republish_src" in f:
        ch["republish"] = RePublish(src=f.get("republish_src", ">"),
                                    dest=f.get("republish_dest", ""),
                                    headers_only=bool(f.get("republish_headers")))
    if "sync_interval" in f:
        value = f["sync_interval"].strip().lower()
        if value != "always":
            try:
                value = parse_duration(value) if not value.replace(".", "", 1).isdigit() \
                    else float(value)
            except ValueError:
                c.usage_error(f"invalid --sync-interval {f['sync_interval']!r}: use a duration "
                              "such as 2m, or always")
        ch["sync_interval"] = value
    return dataclasses.replace(cfg, **ch) if ch else cfg


def load_config(path: Path) -> StreamConfig:
    """A NATS JSON stream definition (as `nats stream add --config` takes)."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        c.usage_error(f"cannot read --config {str(path)!r}: {exc.strerror or exc}")
    except json.JSONDecodeError as exc:
        raise InvalidConfigError(f"--config {str(path)!r} is not valid JSON: {exc}") from None
    return StreamConfig.from_dict(data)


def _ask(flags: dict[str, Any], name: str | None) -> tuple[str, dict[str, Any]]:
    c.err_console().print("[bold]Creating a stream[/] (answers become flags; Enter keeps the "
                          "default)")
    if not name:
        name = typer.prompt("Stream Name")
    flags = dict(flags)
    for key, question, default, kind in PROMPTS:
        if flags.get(key) not in (None, []):
            continue
        if kind == "list":
            flags[key] = [typer.prompt(question, default=name)]
        elif kind is bool:
            flags[key] = typer.confirm(question, default=default)
        elif kind == "allow":
            flags[key] = not typer.confirm(question, default=default)
        elif kind is str:
            flags[key] = typer.prompt(question, default=default)
        else:
            flags[key] = _choose(question, default, kind)
    return name, flags


def _choose(question: str, default: str, choices: tuple[str, ...]) -> Any:
    while True:
        answer = typer.prompt(f"{question} ({', '.join(choices)})", default=default).strip()
        if answer.lower() in choices:
            return int(answer) if answer.isdigit() else answer.lower()
        c.err_console().print(f"[red]{c.escape(answer)!r} is not one of "
                              f"{', '.join(choices)}[/]")


def confirm(question: str, force: bool) -> None:
    """Ask before destroying something (as nats does); -f skips, no terminal needs -f."""
    if force:
        return
    if not c.stdin_is_tty():
        c.usage_error(f"{question.rstrip('?')}: not asked without a terminal, pass --force/-f")
    if not typer.confirm(question, default=False):
        raise typer.Exit(1)


Force = Annotated[bool, typer.Option("--force", "-f", help="do not ask for confirmation")]
Name = Annotated[str, typer.Argument(help="stream name", show_default=False)]
ConfigFile = Annotated[Path | None, typer.Option(
    "--config", help="a NATS JSON stream definition", show_default=False)]


@c.command(app, "add", extra=FLAGS)
def add(
    name: Annotated[str | None, typer.Argument(help="stream name")] = None,
    config: ConfigFile = None,
    defaults: Annotated[bool, typer.Option("--defaults", help="use defaults for every "
                                           "unset flag instead of asking")] = False,
    interactive: Annotated[bool, typer.Option("--interactive", "-i", help="ask for unset "
                                              "values even without a terminal")] = False,
    flags: dict | None = None,
) -> None:
    """Create a stream from flags, a --config JSON file, or by answering questions."""
    flags = flags or {}
    if config is not None:
        cfg = load_config(config)
        if name:
            cfg = dataclasses.replace(cfg, name=name)
    else:
        given = any(v not in (None, []) for v in flags.values())
        ask = not defaults and (interactive or (not given and c.stdin_is_tty()))
        if ask:
            name, flags = _ask(flags, name)
        if not name:
            c.usage_error("missing stream NAME (run it in a terminal to be asked, or pass "
                          "--config file.json)")
        if not flags.get("subjects") and not defaults and not flags.get("mirror") \
                and not flags.get("sources"):
            c.usage_error("missing --subjects: give the subjects the stream captures, or "
                          "--defaults to capture the stream name")
        cfg = StreamConfig(name=name)
    cfg = apply_flags(cfg, flags)
    info = c.connect(gateway=True).add_stream(cfg)
    show_info(info, f"Stream {info.config.name} was created")


@c.command(app, "edit", extra=FLAGS)
def edit(name: Name, config: ConfigFile = None, force: Force = False,
         flags: dict | None = None) -> None:
    """Change a stream's editable settings (flags or a --config JSON file)."""
    js = c.connect(gateway=True)
    old = js.stream_info(name).config
    if config is not None:
        new = dataclasses.replace(load_config(config), name=name)
    else:
        new = old
    new = apply_flags(new, flags or {})
    before, after = old.to_dict(), new.with_defaults().to_dict()
    changes = {k: (before.get(k), after.get(k)) for k in sorted(set(before) | set(after))
               if before.get(k) != after.get(k)}
    if not changes:
        c.usage_error("nothing to change: give a flag or a --config file that differs")
    if not c.wants_json():
        out = c.console()
        out.print(f"Differences ({len(changes)}):")
        for key, (a, b) in changes.items():
            out.print(f"  [red]- {key}: {c.escape(json.dumps(a))}[/]")
            out.print(f"  [green]+ {key}: {c.escape(json.dumps(b))}[/]")
    confirm(f"Really edit stream {name}?", force or c.wants_json())
    info = js.update_stream(new)
    show_info(info, f"Stream {name} was updated")


@c.command(app, "info")
def info(name: Name,
         subjects: Annotated[str | None, typer.Option(
             "--subjects", help="also count messages per subject matching this filter",
             show_default=False)] = None) -> None:
    """Configuration, cluster and state of a stream."""
    show_info(c.connect(gateway=True).stream_info(name, subjects_filter=subjects))


def _cluster(cluster: Any) -> tuple[str | None, list[Any]]:
    if cluster is None:
        return None, []
    if isinstance(cluster, dict):
        return cluster.get("leader"), list(cluster.get("replicas") or ())
    return cluster.leader, list(cluster.replicas)


def _peer(p: Any) -> dict[str, Any]:
    return p if isinstance(p, dict) else p.to_dict()


def replica_text(peer: dict[str, Any]) -> str:
    state = "offline" if peer.get("offline") else ("current" if peer.get("current")
                                                   else "outdated")
    active = peer.get("active")
    seen = f", seen {active / 1e9:.2f}s ago" if isinstance(active, int | float) else ""
    lag = f", {peer.get('lag', 0)} operations behind" if peer.get("lag") else ""
    return f"{peer.get('name')}, {state}{seen}{lag}"


def show_info(info: Any, header: str | None = None) -> None:
    if c.wants_json():
        c.emit_json(info)
        return
    cfg, st = info.config, info.state
    created = c.human_time(info.created) if info.created else "-"
    title = header or f"Information for Stream {cfg.name} created {created}"
    limits = [
        ("Subjects", ", ".join(cfg.subjects) or "-"),
        ("Description", cfg.description),
        ("Replicas", cfg.num_replicas),
        ("Storage", cfg.storage.value.title()),
        ("Placement Cluster", cfg.placement.cluster if cfg.placement else None),
        ("Placement Tags", ", ".join(cfg.placement.tags) if cfg.placement else None),
        ("Acknowledgments", str(not cfg.no_ack).lower()),
        ("Retention", cfg.retention.value.title()),
        ("Discard Policy", cfg.discard.value.title()
         + (" Per Subject" if cfg.discard_new_per_subject else "")),
        ("Duplicate Window", c.human_duration(cfg.duplicate_window)),
        ("Direct Get", str(cfg.allow_direct).lower()),
        ("Allows Msg Delete", str(not cfg.deny_delete).lower()),
        ("Allows Purge", str(not cfg.deny_purge).lower()),
        ("Allows Rollups", str(cfg.allow_rollup_hdrs).lower()),
        ("Allows Per-Message TTL", str(cfg.allow_msg_ttl).lower()),
        ("Sealed", "true" if cfg.sealed else None),
        ("Maximum Messages", c.human_count(cfg.max_msgs)),
        ("Maximum Per Subject", c.human_count(cfg.max_msgs_per_subject)),
        ("Maximum Bytes", c.human_bytes(cfg.max_bytes)),
        ("Maximum Age", c.human_duration(cfg.max_age) if cfg.max_age else "unlimited"),
        ("Maximum Message Size", c.human_bytes(cfg.max_msg_size)),
        ("Maximum Consumers", c.human_count(cfg.max_consumers)),
        ("Mirror", cfg.mirror.name if cfg.mirror else None),
        ("Sources", ", ".join(s.name for s in cfg.sources) or None),
        ("Subject Transform", f"{cfg.subject_transform.src} to {cfg.subject_transform.dest}"
         if cfg.subject_transform else None),
        ("Republish", f"{cfg.republish.src} to {cfg.republish.dest}" if cfg.republish
         else None),
        ("Sync Interval", cfg.sync_interval if cfg.sync_interval is not None else None),
    ]
    leader, peers = _cluster(info.cluster)
    cluster_rows: list[tuple[str, Any]] = [("Leader", leader or "none")]
    for p in peers:
        cluster_rows.append(("Replica", replica_text(_peer(p))))
    first = f"{st.first_seq:,}" + (f" @ {c.human_time(st.first_ts)}" if st.first_ts else "")
    last = f"{st.last_seq:,}" + (f" @ {c.human_time(st.last_ts)}" if st.last_ts else "")
    state_rows = [
        ("Messages", f"{st.messages:,}"), ("Bytes", c.human_bytes(st.bytes)),
        ("First Sequence", first), ("Last Sequence", last),
        ("Deleted Messages", f"{st.num_deleted:,}" if st.num_deleted else None),
        ("Active Consumers", f"{st.consumer_count:,}"),
        ("Number of Subjects", f"{st.num_subjects:,}"),
    ]
    items: list[Any] = [f"[bold]{c.escape(title)}[/]",
                        c.kv_table(limits, "Configuration:"),
                        c.kv_table(cluster_rows, "Cluster Information:"),
                        c.kv_table(state_rows, "State:")]
    if st.subjects:
        items.append(c.list_table(["Subject", "Messages"], sorted(
            (k, f"{v:,}") for k, v in st.subjects.items()), right=[1]))
    c.print_renderables(*items)


@c.command(app, "ls")
def ls(subject: Annotated[str | None, typer.Option(
           "--subject", help="only streams capturing this subject", show_default=False)] = None,
       names: Annotated[bool, typer.Option("--names", "-n", help="names only")] = False) -> None:
    """List streams."""
    js = c.connect(gateway=True)
    if names:
        found = sorted(js.stream_names(subject))
        if c.wants_json():
            c.emit_json(found)
        else:
            for n in found:
                typer.echo(n)
        return
    infos = sorted(js.streams_info(subject), key=lambda i: i.config.name)
    if c.wants_json():
        c.emit_json(infos)
        return
    if not infos:
        c.console().print("No streams defined")
        return
    rows = [(i.config.name, i.config.description or "", c.human_time(i.created),
             f"{i.state.messages:,}", c.human_bytes(i.state.bytes),
             c.human_time(i.state.last_ts) if i.state.last_ts else "never") for i in infos]
    c.print_renderables(c.list_table(
        ["Name", "Description", "Created", "Messages", "Size", "Last Message"], rows,
        title=f"Streams ({len(infos)})", right=[3, 4]))


@c.command(app, "rm")
def rm(name: Name, force: Force = False) -> None:
    """Delete a stream and all its messages."""
    js = c.connect(gateway=True)
    js.stream_info(name)  # a missing stream fails before asking
    confirm(f"Really delete stream {name}?", force)
    js.delete_stream(name)
    if c.wants_json():
        c.emit_json({"deleted": name})
    else:
        c.console().print(f"Stream {c.escape(name)} was deleted")


@c.command(app, "step-down")
def step_down(name: Name) -> None:
    """Move the stream's leadership to another replica (before work on the leader's node)."""
    leader = c.connect(gateway=True).stream_leader_stepdown(name)
    if c.wants_json():
        c.emit_json({"stream": name, "leader": leader})
    elif leader is None:
        c.console().print(f"Stream {c.escape(name)} has one replica: it keeps leading")
    else:
        c.console().print(f"Stream {c.escape(name)} is now led by {c.escape(leader)}")


@c.command(app, "peer-remove")
def peer_remove(name: Name, peer: Annotated[str, typer.Argument(
        help="the replica to replace (as `stream info` names them: r0, r1, ...)")]) -> None:
    """Replace one replica of the stream with a new one (it catches up, then the old one
    leaves and its data is deleted)."""
    info = c.connect(gateway=True).stream_peer_remove(name, peer)
    cluster = info.cluster
    # a group between leaders names none: list the replicas it does name
    named = [cluster.leader, *(r.name for r in cluster.replicas)] if cluster else []
    replicas = sorted(r for r in named if r)
    if c.wants_json():
        c.emit_json({"stream": name, "removed": peer, "replicas": replicas})
    else:
        c.console().print(f"Stream {c.escape(name)}: {c.escape(peer)} was replaced; "
                          f"replicas {', '.join(map(c.escape, replicas))}")


@c.command(app, "purge")
def purge(name: Name, force: Force = False,
          subject: Annotated[str | None, typer.Option("--subject", help="only this subject",
                                                      show_default=False)] = None,
          seq: Annotated[int | None, typer.Option("--seq", min=1, help="up to (not including)"
                                                  " this sequence", show_default=False)] = None,
          keep: Annotated[int | None, typer.Option("--keep", min=0, help="keep this many of "
                                                   "the newest", show_default=False)] = None,
          ) -> None:
    """Remove messages from a stream (all, or by subject, sequence or keep)."""
    if seq is not None and keep is not None:
        c.usage_error("--seq and --keep can not be combined")
    js = c.connect(gateway=True)
    js.stream_info(name)
    confirm(f"Really purge stream {name}?", force)
    purged = js.purge_stream(name, subject=subject, seq=seq, keep=keep)
    if c.wants_json():
        c.emit_json({"stream": name, "purged": purged})
    else:
        c.console().print(f"Purged {purged:,} messages from {c.escape(name)}")


@c.command(app, "backup")
def backup(name: Name,
           file: Annotated[Path, typer.Argument(help="the archive file to write",
                                                show_default=False)],
           consumers: Annotated[bool, typer.Option(
               "--consumers/--no-consumers", help="include the consumers and their state")
           ] = True) -> None:
    """Write a stream (its messages, and its consumers with their positions) to one
    self-checking archive file, restorable here or in another cluster."""
    summary = c.connect().backup_stream(name, file, consumers=consumers)
    if c.wants_json():
        c.emit_json(dataclasses.asdict(summary))
    else:
        c.console().print(
            f"Backed up stream {c.escape(name)}: {summary.messages:,} messages "
            f"({summary.data_bytes:,} bytes of data), {summary.consumers} consumers "
            f"to {c.escape(file)} ({summary.size:,} bytes)")


@c.command(app, "restore")
def restore(file: Annotated[Path, typer.Argument(help="an archive `stream backup` wrote",
                                                 exists=True, dir_okay=False,
                                                 show_default=False)],
            name: Annotated[str | None, typer.Option(
                "--name", help="restore under this name instead", show_default=False)] = None,
            subjects: Annotated[list[str] | None, typer.Option(
                "--subjects", "-s", help="capture these subjects instead (with --name, so "
                "they do not overlap the original's)", show_default=False)] = None,
            ) -> None:
    """Re-create a stream from a backup: the same messages at the same sequences, the same
    consumers at the same positions. The whole archive is checked first: a damaged one is
    refused and nothing is created."""
    from rayjet.storage.backup_archive import BackupDamagedError, verify_archive

    config = None
    if name or subjects:
        try:
            with open(file, "rb") as f:
                config = dict(verify_archive(f).config)
        except BackupDamagedError as exc:
            from rayjet.errors import error_for

            raise error_for("STREAM_RESTORE", err=str(exc)) from None
        if name:
            config["name"] = name
        if subjects:
            config["subjects"] = [x for s in subjects for x in s.split(",") if x]
    info = c.connect().restore_stream(file, config)
    if c.wants_json():
        c.emit_json(info)
    else:
        st = info.state
        c.console().print(f"Restored stream {c.escape(info.config.name)}: {st.messages:,} "
                          f"messages, sequences {st.first_seq}..{st.last_seq}, "
                          f"{st.consumer_count} consumers")


def print_msg(msg: Any, raw: bool = False) -> None:
    """A stored message as `nats stream view` prints it."""
    if raw:
        typer.echo(msg.data, nl=True) if isinstance(msg.data, str) else \
            typer.get_binary_stream("stdout").write(msg.data + b"\n")
        return
    out = c.console()
    stamp = msg.time.strftime("%Y-%m-%d %H:%M:%S") if msg.time else "-"
    out.print(f"[bold][{msg.seq}][/] Subject: {c.escape(msg.subject)} Received: {stamp}")
    headers = msg.headers if msg.hdrs else {}
    for k, v in headers.items():
        out.print(f"  {c.escape(k)}: {c.escape(v)}")
    out.print()
    out.print(c.escape(c.show_data(msg.data)))
    out.print()


def _msg_json(msg: Any) -> dict[str, Any]:
    return c.message_dict(msg.subject, msg.seq, msg.data, msg.headers if msg.hdrs else None,
                          msg.time, stream=msg.stream)


@c.command(app, "view")
def view(name: Name,
         subject: Annotated[str | None, typer.Option("--subject", help="only this subject "
                                                     "filter", show_default=False)] = None,
         count: Annotated[int, typer.Option("--count", "-n", min=1,
                                            help="show at most this many")] = 25,
         start: Annotated[int | None, typer.Option("--start-seq", "--id", min=1,
                                                   help="start at this sequence",
                                                   show_default=False)] = None,
         raw: Annotated[bool, typer.Option("--raw", help="message bodies only")] = False) -> None:
    """Show the messages of a stream, oldest first."""
    js = c.connect(gateway=True)
    info = js.stream_info(name)
    seq = max(start or 0, info.state.first_seq, 1)
    shown: list[Any] = []
    while len(shown) < count and seq <= info.state.last_seq:
        try:
            msg = js.get_msg(name, seq, next_by_subject=subject or ">")
        except NotFoundError:
            break
        shown.append(msg)
        if not c.wants_json():
            print_msg(msg, raw)
        seq = msg.seq + 1
    if c.wants_json():
        c.emit_json([_msg_json(m) for m in shown])
    elif not shown and not raw:
        c.console().print(f"No messages in {c.escape(name)}"
                          + (f" on {c.escape(subject)}" if subject else ""))


@c.command(app, "get")
def get(name: Name,
        seq: Annotated[int | None, typer.Argument(help="sequence", show_default=False)] = None,
        last_for: Annotated[str | None, typer.Option("--last-for", "-S", help="the last "
                                                     "message of this subject",
                                                     show_default=False)] = None,
        direct: Annotated[bool, typer.Option("--direct", help="read from any replica")] = False,
        raw: Annotated[bool, typer.Option("--raw", help="the body only")] = False) -> None:
    """Show one message, by sequence or the last of a subject."""
    if (seq is None) == (last_for is None):
        c.usage_error("give a sequence or --last-for SUBJECT (one of them)")
    msg = c.connect(gateway=True).get_msg(name, seq, last_by_subject=last_for, direct=direct)
    if c.wants_json():
        c.emit_json(_msg_json(msg))
    else:
        print_msg(msg, raw)


@c.command(app, "rmm")
def rmm(name: Name, seq: Annotated[int, typer.Argument(min=1, help="sequence")],
        force: Force = False,
        erase: Annotated[bool, typer.Option("--erase", help="overwrite the data too")] = False,
        ) -> None:
    """Delete one message from a stream."""
    js = c.connect(gateway=True)
    js.stream_info(name)
    confirm(f"Really remove message {seq} from stream {name}?", force)
    js.delete_msg(name, seq, erase=erase)
    if c.wants_json():
        c.emit_json({"stream": name, "seq": seq, "deleted": True})
    else:
        c.console().print(f"Message {seq} was removed from {c.escape(name)}")


def report_rows(infos: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for i in infos:
        leader, peers = _cluster(i.cluster)
        rows.append({
            "stream": i.config.name, "storage": i.config.storage.value,
            "replicas": i.config.num_replicas,
            "placement": (i.config.placement.to_dict() if i.config.placement else None),
            "consumers": i.state.consumer_count, "messages": i.state.messages,
            "bytes": i.state.bytes, "deleted": i.state.num_deleted,
            "leader": leader,
            "peers": [{"name": _peer(p).get("name"), "current": _peer(p).get("current"),
                       "offline": _peer(p).get("offline"), "lag": _peer(p).get("lag", 0)}
                      for p in peers]})
    return rows


def replicas_cell(row: dict[str, Any]) -> str:
    parts = [f"{row['leader']}*"] if row["leader"] else []
    for p in row["peers"]:
        mark = "!" if p["offline"] else ("" if p["current"] else "~")
        lag = f" (lag {p['lag']})" if p["lag"] else ""
        parts.append(f"{p['name']}{mark}{lag}")
    for rid, note in sorted(row.get("troubles", {}).items()):
        parts.append(f"[{rid}: {note}]")
    return ", ".join(parts) or "-"


@c.command(app, "report")
def report(subject: Annotated[str | None, typer.Option(
        "--subject", help="only streams capturing this subject", show_default=False)] = None,
        ) -> None:
    """One line per stream: size, consumers and replica health (leader*, ~ behind, ! offline)."""
    infos = sorted(c.connect(gateway=True).streams_info(subject), key=lambda i: i.config.name)
    rows = report_rows(infos)
    if c.wants_json():
        c.emit_json(rows)
        return
    if not rows:
        c.console().print("No streams defined")
        return
    table = [(r["stream"], r["storage"].title(),
              (r["placement"] or {}).get("cluster") or ", ".join(
                  (r["placement"] or {}).get("tags") or ()) or "",
              f"{r['consumers']:,}", f"{r['messages']:,}", c.human_bytes(r["bytes"]),
              f"{r['deleted']:,}", replicas_cell(r)) for r in rows]
    c.print_renderables(c.list_table(
        ["Stream", "Storage", "Placement", "Consumers", "Messages", "Bytes", "Deleted",
         "Replicas"], table, title="Stream Report", right=[3, 4, 5, 6]))
