"""``rayjet consumer ...``: add, info, ls, step-down, rm, next, sub."""

import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from rayjet.api import AckPolicy, ConsumerConfig, DeliverPolicy, ReplayPolicy
from rayjet.api.duration import parse_rfc3339
from rayjet.cli import common as c
from rayjet.cli.streams import confirm, replica_text
from rayjet.errors import InvalidConfigError, NoMessagesError
from rayjet.errors import TimeoutError as RayjetTimeout

app = typer.Typer(no_args_is_help=True)

Stream = Annotated[str, typer.Argument(help="stream name", show_default=False)]
Consumer = Annotated[str, typer.Argument(help="consumer name", show_default=False)]
Force = Annotated[bool, typer.Option("--force", "-f", help="do not ask for confirmation")]


def parse_deliver(text: str) -> dict[str, Any]:
    """nats' --deliver: all, last, new, last-per-subject, a start sequence, a duration ago
    (``2m``, ``1h``) or an RFC 3339 time."""
    s = text.strip().lower()
    named = {"all": DeliverPolicy.ALL, "last": DeliverPolicy.LAST, "new": DeliverPolicy.NEW,
             "last-per-subject": DeliverPolicy.LAST_PER_SUBJECT,
             "subject": DeliverPolicy.LAST_PER_SUBJECT}
    if s in named:
        return {"deliver_policy": named[s]}
    if s.isdigit() and int(s) > 0:
        return {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": int(s)}
    try:
        when = parse_rfc3339(text.strip())
    except (ValueError, InvalidConfigError):
        when = None
    if when is None:
        ago = c.parse_age(s, "--deliver")
        when = datetime.now(tz=UTC) - timedelta(seconds=ago)
    return {"deliver_policy": DeliverPolicy.BY_START_TIME, "opt_start_time": when}


def load_config(path: Path) -> ConsumerConfig:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        c.usage_error(f"cannot read --config {str(path)!r}: {exc.strerror or exc}")
    except json.JSONDecodeError as exc:
        raise InvalidConfigError(f"--config {str(path)!r} is not valid JSON: {exc}") from None
    return ConsumerConfig.from_dict(data.get("config", data))


@c.command(app, "add")
def add(
    stream: Stream,
    name: Annotated[str | None, typer.Argument(help="consumer name (durable)")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="a NATS JSON consumer "
                                                "definition", show_default=False)] = None,
    pull: Annotated[bool, typer.Option("--pull", help="a pull consumer (the default)")] = False,
    target: Annotated[str | None, typer.Option("--target", help="push: deliver to this "
                                               "subject", show_default=False)] = None,
    filters: Annotated[list[str] | None, typer.Option("--filter", help="subject filter "
                                                      "(repeatable)", show_default=False)] = None,
    ack: Annotated[Literal["explicit", "all", "none"] | None, typer.Option(
        "--ack", help="acknowledgement policy", show_default=False)] = None,
    replay: Annotated[Literal["instant", "original"] | None, typer.Option(
        "--replay", help="replay policy", show_default=False)] = None,
    deliver: Annotated[str | None, typer.Option(
        "--deliver", help="all, last, new, last-per-subject, a sequence, a duration ago (2m) "
        "or a time", show_default=False)] = None,
    ephemeral: Annotated[bool, typer.Option("--ephemeral", help="no durable name")] = False,
    max_deliver: Annotated[int | None, typer.Option("--max-deliver", help="deliveries per "
                                                    "message (-1 unlimited)",
                                                    show_default=False)] = None,
    max_pending: Annotated[int | None, typer.Option("--max-pending", help="unacknowledged "
                                                    "messages at once", show_default=False)
                           ] = None,
    wait: Annotated[str | None, typer.Option("--wait", help="ack wait, e.g. 30s",
                                             show_default=False)] = None,
    replicas: Annotated[int | None, typer.Option("--replicas", min=0, max=5, help="replicas "
                                                 "(0: as the stream)", show_default=False)
                        ] = None,
    memory: Annotated[bool, typer.Option("--memory", help="keep state in memory")] = False,
    description: Annotated[str | None, typer.Option("--description", show_default=False)
                           ] = None,
    heartbeat: Annotated[str | None, typer.Option("--heartbeat", help="push idle heartbeat",
                                                  show_default=False)] = None,
    flow_control: Annotated[bool, typer.Option("--flow-control", help="push flow control")
                            ] = False,
    deliver_group: Annotated[str | None, typer.Option("--deliver-group", show_default=False)
                             ] = None,
    headers_only: Annotated[bool, typer.Option("--headers-only", help="deliver headers only")
                            ] = False,
    inactive: Annotated[str | None, typer.Option("--inactive-threshold", help="remove after "
                                                 "this long unused", show_default=False)
                        ] = None,
    sample: Annotated[int | None, typer.Option("--sample", min=0, max=100, help="percent of "
                                               "acks sampled", show_default=False)] = None,
    max_waiting: Annotated[int | None, typer.Option("--max-waiting", min=1, help="pull "
                                                    "requests waiting at once",
                                                    show_default=False)] = None,
) -> None:
    """Create a consumer (pull unless --target; durable unless --ephemeral)."""
    if pull and target:
        c.usage_error("--pull and --target can not be combined (--target makes a push consumer)")
    base = load_config(config) if config else None
    cfg: dict[str, Any] = ({f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
                           if base else {})
    if name:
        cfg["durable_name"] = name
    if not cfg.get("durable_name") and not cfg.get("name") and not ephemeral:
        c.usage_error("missing consumer NAME (or --ephemeral for a consumer without one)")
    if ephemeral:
        cfg.pop("durable_name", None)
    if target:
        cfg["deliver_subject"] = target
    found = c.split_list(filters)
    if len(found) == 1:
        cfg["filter_subject"] = found[0]
    elif found:
        cfg["filter_subjects"] = tuple(found)
    if ack:
        cfg["ack_policy"] = AckPolicy(ack)
    if replay:
        cfg["replay_policy"] = ReplayPolicy(replay)
    if deliver:
        cfg.update(parse_deliver(deliver))
    for key, value in (("max_deliver", max_deliver), ("max_ack_pending", max_pending),
                       ("num_replicas", replicas), ("description", description),
                       ("deliver_group", deliver_group), ("max_waiting", max_waiting)):
        if value is not None:
            cfg[key] = value
    for key, value, flag in (("ack_wait", wait, "--wait"), ("idle_heartbeat", heartbeat,
                                                            "--heartbeat"),
                             ("inactive_threshold", inactive, "--inactive-threshold")):
        if value is not None:
            cfg[key] = c.parse_age(value, flag)
    if memory:
        cfg["mem_storage"] = True
    if flow_control:
        cfg["flow_control"] = True
    if headers_only:
        cfg["headers_only"] = True
    if sample is not None:
        cfg["sample_freq"] = f"{sample}%"
    info = c.connect(gateway=True).add_consumer(stream, ConsumerConfig(**cfg))
    show_info(info, f"Consumer {info.stream_name} > {info.name} was created")


def show_info(info: Any, header: str | None = None) -> None:
    if c.wants_json():
        c.emit_json(info)
        return
    cfg = info.config
    created = c.human_time(info.created) if info.created else "-"
    title = header or f"Information for Consumer {info.stream_name} > {info.name} created " \
        f"{created}"
    deliver = cfg.deliver_policy.value
    if cfg.opt_start_seq:
        deliver += f" (from sequence {cfg.opt_start_seq})"
    if cfg.opt_start_time:
        deliver += f" (since {cfg.opt_start_time.isoformat()})"
    conf = [
        ("Name", info.name), ("Durable Name", cfg.durable_name),
        ("Description", cfg.description),
        ("Delivery Subject", cfg.deliver_subject) if cfg.deliver_subject else ("Pull Mode", "true"),
        ("Filter Subject", cfg.filter_subject or (", ".join(cfg.filter_subjects) or None)),
        ("Deliver Policy", deliver),
        ("Deliver Group", cfg.deliver_group),
        ("Ack Policy", cfg.ack_policy.value.title()),
        ("Ack Wait", c.human_duration(cfg.ack_wait) if cfg.ack_wait else None),
        ("Replay Policy", cfg.replay_policy.value.title()),
        ("Maximum Deliveries", c.human_count(cfg.max_deliver) if cfg.max_deliver > 0 else None),
        ("Sampling Rate", cfg.sample_freq),
        ("Max Ack Pending", f"{cfg.max_ack_pending:,}" if cfg.max_ack_pending else None),
        ("Max Waiting Pulls", f"{cfg.max_waiting:,}" if cfg.max_waiting and cfg.is_pull
         else None),
        ("Inactive Threshold", c.human_duration(cfg.inactive_threshold)
         if cfg.inactive_threshold else None),
        ("Replicas", cfg.num_replicas or None), ("Memory Storage", "true" if cfg.mem_storage
                                                 else None),
        ("Headers Only", "true" if cfg.headers_only else None),
        ("Flow Control", "true" if cfg.flow_control else None),
    ]
    cluster = info.cluster
    cluster_rows: list[tuple[str, Any]] = []
    if cluster is not None:
        cluster_rows.append(("Leader", cluster.leader or "none"))
        for p in cluster.replicas:
            cluster_rows.append(("Replica", replica_text(p.to_dict())))
    d, a = info.delivered, info.ack_floor
    state = [
        ("Last Delivered Message", f"Consumer sequence: {d.consumer_seq:,} Stream sequence: "
                                   f"{d.stream_seq:,}"),
        ("Acknowledgment Floor", f"Consumer sequence: {a.consumer_seq:,} Stream sequence: "
                                 f"{a.stream_seq:,}"),
        ("Outstanding Acks", f"{info.num_ack_pending:,}"
         + (f" out of maximum {cfg.max_ack_pending:,}" if cfg.max_ack_pending else "")),
        ("Redelivered Messages", f"{info.num_redelivered:,}"),
        ("Unprocessed Messages", f"{info.num_pending:,}"),
        ("Waiting Pulls", f"{info.num_waiting:,}" if cfg.is_pull else None),
    ]
    items = [f"[bold]{c.escape(title)}[/]", c.kv_table(conf, "Configuration:")]
    if cluster_rows:
        items.append(c.kv_table(cluster_rows, "Cluster Information:"))
    items.append(c.kv_table(state, "State:"))
    c.print_renderables(*items)


@c.command(app, "info")
def info(stream: Stream, name: Consumer) -> None:
    """Configuration and delivery state of a consumer."""
    show_info(c.connect(gateway=True).consumer_info(stream, name))


@c.command(app, "ls")
def ls(stream: Stream,
       names: Annotated[bool, typer.Option("--names", "-n", help="names only")] = False) -> None:
    """List the consumers of a stream."""
    js = c.connect(gateway=True)
    js.stream_info(stream)  # 10059 for a missing stream
    if names:
        found = sorted(js.consumer_names(stream))
        if c.wants_json():
            c.emit_json(found)
        else:
            for n in found:
                typer.echo(n)
        return
    infos = sorted(js.consumers_info(stream), key=lambda i: i.name)
    if c.wants_json():
        c.emit_json(infos)
        return
    if not infos:
        c.console().print(f"No consumers defined on {c.escape(stream)}")
        return
    rows = [(i.name, i.config.description or "", c.human_time(i.created),
             f"{i.num_ack_pending:,}", f"{i.num_pending:,}",
             c.human_time(i.delivered.last_active) if i.delivered.last_active else "never")
            for i in infos]
    c.print_renderables(c.list_table(
        ["Name", "Description", "Created", "Ack Pending", "Unprocessed", "Last Delivery"],
        rows, title=f"Consumers of {stream} ({len(infos)})", right=[3, 4]))


@c.command(app, "step-down")
def step_down(stream: Stream, name: Consumer) -> None:
    """Move the consumer's leadership to another replica."""
    leader = c.connect(gateway=True).consumer_leader_stepdown(stream, name)
    what = f"Consumer {c.escape(stream)} > {c.escape(name)}"
    if c.wants_json():
        c.emit_json({"stream": stream, "consumer": name, "leader": leader})
    elif leader is None:
        c.console().print(f"{what} has one replica: it keeps leading")
    else:
        c.console().print(f"{what} is now led by {c.escape(leader)}")


@c.command(app, "rm")
def rm(stream: Stream, name: Consumer, force: Force = False) -> None:
    """Delete a consumer."""
    js = c.connect(gateway=True)
    js.consumer_info(stream, name)
    confirm(f"Really delete consumer {stream} > {name}?", force)
    js.delete_consumer(stream, name)
    if c.wants_json():
        c.emit_json({"stream": stream, "deleted": name})
    else:
        c.console().print(f"Consumer {c.escape(stream)} > {c.escape(name)} was deleted")


def print_delivery(msg: Any, raw: bool, note: str | None) -> None:
    if raw:
        typer.get_binary_stream("stdout").write(msg.data + b"\n")
        return
    out = c.console()
    md = msg.metadata
    out.print(f"[{datetime.now().strftime('%H:%M:%S')}] subj: {c.escape(msg.subject)} / "
              f"stream seq: {md.sequence.stream} / consumer seq: {md.sequence.consumer} / "
              f"delivered: {md.num_delivered} / pending: {md.num_pending}")
    for k, v in (msg.headers or {}).items():
        out.print(f"  {c.escape(k)}: {c.escape(v)}")
    out.print()
    out.print(c.escape(c.show_data(msg.data)))
    out.print()
    if note:
        out.print(note)
        out.print()


def delivery_json(msg: Any, acked: bool) -> dict[str, Any]:
    md = msg.metadata
    return c.message_dict(msg.subject, md.sequence.stream, msg.data, msg.headers or None,
                          md.timestamp, consumer_seq=md.sequence.consumer,
                          delivered=md.num_delivered, pending=md.num_pending, acked=acked)


def _consume(stream: str, name: str, count: int | None, no_ack: bool, wait: float | None,
             raw: bool, follow: bool) -> int:
    """Fetch from a consumer until ``count`` messages; acks each unless ``no_ack``.

    ``next`` (not following) fails when nothing comes within ``wait``; ``sub`` (following)
    stops after ``wait`` idle seconds, or runs until interrupted when ``wait`` is None."""
    js = c.connect(gateway=True)
    info = js.consumer_info(stream, name)  # 10014 for a missing consumer: never create one
    acks = info.config.ack_policy is not AckPolicy.NONE and not no_ack
    sub = js.pull_subscribe(durable=name, stream=stream)
    got = 0
    idle_since = time.monotonic()
    poll = wait if not follow else min(wait or 5.0, 5.0)
    try:
        while count is None or got < count:
            want = 1 if not follow else min(256, count - got if count else 256)
            try:
                msgs = sub.fetch(batch=want, timeout=poll)
            except (NoMessagesError, RayjetTimeout):
                if not follow:
                    if got:
                        break
                    raise NoMessagesError(
                        f"no message from {stream} > {name} within {wait:g}s",
                        hint="publish to the stream, or wait longer with --wait") from None
                if wait is not None and time.monotonic() - idle_since >= wait:
                    break
                continue
            idle_since = time.monotonic()
            for msg in msgs:
                got += 1
                if acks:
                    msg.ack_sync()
                if c.wants_json():
                    c.emit_line(delivery_json(msg, acks))
                else:
                    print_delivery(msg, raw, "Acknowledged message" if acks and not follow
                                   else None)
    finally:
        sub.unsubscribe()
    return got


@c.command(app, "next")
def next_(stream: Stream, name: Consumer,
          no_ack: Annotated[bool, typer.Option("--no-ack", help="do not acknowledge")] = False,
          count: Annotated[int, typer.Option("--count", min=1, help="messages to fetch")] = 1,
          wait: Annotated[float, typer.Option("--wait", min=0.01, help="seconds to wait for a "
                                              "message")] = 5.0,
          raw: Annotated[bool, typer.Option("--raw", help="message bodies only")] = False,
          ) -> None:
    """Fetch the next message(s) from a pull consumer and acknowledge them (as `nats
    consumer next`); with --json one JSON line per message."""
    _consume(stream, name, count, no_ack, wait, raw, follow=False)


@c.command(app, "sub")
def sub(stream: Stream, name: Consumer,
        no_ack: Annotated[bool, typer.Option("--no-ack", help="do not acknowledge")] = False,
        count: Annotated[int | None, typer.Option("--count", min=1, help="stop after this "
                                                  "many", show_default=False)] = None,
        wait: Annotated[float | None, typer.Option("--wait", min=0.01, help="stop after this "
                                                   "many idle seconds", show_default=False)
                        ] = None,
        raw: Annotated[bool, typer.Option("--raw", help="message bodies only")] = False) -> None:
    """Receive from a consumer until --count messages, --wait idle seconds or Ctrl-C."""
    started = time.monotonic()
    got = _consume(stream, name, count, no_ack, wait, raw, follow=True)
    if not c.wants_json() and not raw:
        c.err_console().print(f"Received {got:,} messages in "
                              f"{time.monotonic() - started:.2f}s")
