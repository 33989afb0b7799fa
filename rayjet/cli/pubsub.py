"""``rayjet pub``, ``rayjet req`` and ``rayjet sub`` (a live tail via an ordered consumer)."""

import random
import re
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from rayjet.api import DeliverPolicy
from rayjet.cli import common as c
from rayjet.errors import APIError
from rayjet.errors import TimeoutError as RayjetTimeout

_TEMPLATE = re.compile(r"\{\{\s*(\w+)((?:\s+[^\s}]+)*)\s*\}\}")

Subject = Annotated[str, typer.Argument(help="subject", show_default=False)]
Body = Annotated[str | None, typer.Argument(
    help="message body, with templates such as {{Count}}, {{ID}}, {{Time}}, {{Unix}}, "
         "{{UnixNano}}, {{Random 1 10}} (default: read stdin)", show_default=False)]
Headers = Annotated[list[str] | None, typer.Option(
    "--header", "-H", help="header key:value (repeatable)", show_default=False)]
Count = Annotated[int, typer.Option("--count", min=1, help="messages to publish")]


def render(template: str, count: int) -> str:
    """nats' body templates: {{Count}}, {{ID}}, {{Time}}/{{TimeStamp}}, {{Unix}},
    {{UnixNano}}, {{Random min max}}. Unknown names are left as they are."""

    def one(m: re.Match) -> str:
        name, args = m.group(1).lower(), m.group(2).split()
        if name == "count":
            return str(count)
        if name == "id":
            return uuid.uuid4().hex
        if name in ("time", "timestamp"):
            return datetime.now(tz=UTC).isoformat()
        if name == "unix":
            return str(int(time.time()))
        if name == "unixnano":
            return str(time.time_ns())
        if name == "random" and len(args) == 2 and all(a.isdigit() for a in args):
            return str(random.randint(int(args[0]), int(args[1])))
        return m.group(0)

    return _TEMPLATE.sub(one, template)


def _body(body: str | None) -> str:
    if body is not None:
        return body
    if c.stdin_is_tty():
        c.usage_error("missing BODY (or pipe it on stdin)")
    return sys.stdin.read()


def _messages(subject: str, body: str | None, headers: list[str] | None, count: int
              ) -> list[tuple[str, bytes, dict | None]]:
    text = _body(body)
    hdrs = c.parse_headers(headers)
    out = []
    for i in range(1, count + 1):
        h = {k: render(v, i) for k, v in hdrs.items()} or None
        out.append((subject, render(text, i).encode(), h))
    return out


def pub(subject: Subject, body: Body = None, headers: Headers = None, count: Count = 1,
        sleep: Annotated[float, typer.Option("--sleep", min=0.0, help="seconds between "
                                             "messages (0: publish as one batch)")] = 0.0,
        ) -> None:
    """Publish to a stream's subject; every message is stored before this returns."""
    js = c.connect(gateway=True)
    msgs = _messages(subject, body, headers, count)
    if sleep or count == 1:
        answers: list[Any] = []
        for i, (s, d, h) in enumerate(msgs):
            if i and sleep:
                time.sleep(sleep)
            try:
                answers.append(js.publish(s, d, headers=h))
            except APIError as err:
                if count == 1:
                    raise
                answers.append(err)
    else:
        answers = js.publish_batch(msgs)
    errors = [a for a in answers if isinstance(a, APIError)]
    acks = [a for a in answers if not isinstance(a, APIError)]
    if c.wants_json():
        c.emit_json({"published": len(acks), "acks": acks,
                     "errors": [e.to_wire() | {"hint": e.hint} for e in errors]})
    else:
        out = c.console()
        if count <= 10:
            for (s, d, _h), a in zip(msgs, answers, strict=True):
                if isinstance(a, APIError):
                    out.print(f"[red]Failed[/] {len(d)} bytes to {c.escape(s)}: "
                              f"{c.escape(a.description)} (err_code={a.err_code})")
                else:
                    dup = " [yellow](duplicate)[/]" if a.duplicate else ""
                    out.print(f"Published {len(d)} bytes to {c.escape(s)}: stream "
                              f"{c.escape(a.stream)} seq {a.seq}{dup}")
        else:
            size = sum(len(d) for _s, d, _h in msgs)
            out.print(f"Published {len(acks):,} messages ({c.human_bytes(size)}) to "
                      f"{c.escape(subject)}" + (f", {len(errors):,} failed" if errors else ""))
    if errors:
        if count == 1 or len(errors) == len(answers):
            c.fail(errors[0])
        raise typer.Exit(1)


def req(subject: Subject, body: Body = None, headers: Headers = None, count: Count = 1) -> None:
    """Publish and show each PubAck with its round trip (as `nats req` to a stream)."""
    js = c.connect(gateway=True)
    out = c.console()
    acks = []
    for s, d, h in _messages(subject, body, headers, count):
        start = time.perf_counter()
        ack = js.publish(s, d, headers=h)
        rtt = time.perf_counter() - start
        acks.append(ack)
        if not c.wants_json():
            out.print(f"[dim]{datetime.now().strftime('%H:%M:%S')} Sending request on "
                      f"\"{c.escape(s)}\"[/]")
            out.print(f"[dim]{datetime.now().strftime('%H:%M:%S')} Received with rtt "
                      f"{rtt * 1000:.3f}ms[/]")
            out.print(c.escape(ack_line(ack)))
            out.print()
    if c.wants_json():
        c.emit_json(acks[0] if count == 1 else acks)


def ack_line(ack: Any) -> str:
    import json

    return json.dumps(ack.to_dict(), separators=(",", ":"))


def sub(subject: Annotated[str | None, typer.Argument(
            help="subject filter (default: every subject of --stream)", show_default=False)
        ] = None,
        stream: Annotated[str | None, typer.Option("--stream", help="the stream (default: "
                                                   "the one capturing SUBJECT)",
                                                   show_default=False)] = None,
        count: Annotated[int | None, typer.Option("--count", min=1, help="stop after this "
                                                  "many", show_default=False)] = None,
        wait: Annotated[float | None, typer.Option("--wait", min=0.01, help="stop after this "
                                                   "many idle seconds", show_default=False)
                        ] = None,
        all_: Annotated[bool, typer.Option("--all", help="from the first message")] = False,
        last: Annotated[bool, typer.Option("--last", help="from the last message")] = False,
        last_per_subject: Annotated[bool, typer.Option("--last-per-subject",
                                                       help="the last of each subject")] = False,
        start_seq: Annotated[int | None, typer.Option("--start-seq", min=1, help="from this "
                                                      "sequence", show_default=False)] = None,
        since: Annotated[str | None, typer.Option("--since", help="from this long ago, "
                                                  "e.g. 1h", show_default=False)] = None,
        headers_only: Annotated[bool, typer.Option("--headers-only")] = False,
        raw: Annotated[bool, typer.Option("--raw", help="message bodies only")] = False) -> None:
    """Tail a stream (or a subject of it) live through an ordered consumer; new messages
    only unless --all/--last/--start-seq/--since."""
    if subject is None and stream is None:
        c.usage_error("give a SUBJECT or --stream")
    chosen = [all_, last, last_per_subject, start_seq is not None, since is not None]
    if sum(chosen) > 1:
        c.usage_error("use one of --all, --last, --last-per-subject, --start-seq, --since")
    params: dict[str, Any] = {"deliver_policy": DeliverPolicy.NEW}
    if all_:
        params["deliver_policy"] = DeliverPolicy.ALL
    elif last:
        params["deliver_policy"] = DeliverPolicy.LAST
    elif last_per_subject:
        params["deliver_policy"] = DeliverPolicy.LAST_PER_SUBJECT
    elif start_seq is not None:
        params.update(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start_seq)
    elif since is not None:
        ago = c.parse_age(since, "--since")
        params.update(deliver_policy=DeliverPolicy.BY_START_TIME,
                      opt_start_time=datetime.now(tz=UTC) - timedelta(seconds=ago))
    js = c.connect(gateway=True)
    policy = params.pop("deliver_policy")
    subscription = js.subscribe(subject, stream=stream, ordered_consumer=True,
                                deliver_policy=policy,
                                headers_only=True if headers_only else None, **params)
    got = 0
    idle_since = time.monotonic()
    out = c.console()
    try:
        while count is None or got < count:
            try:
                msg = subscription.next_msg(timeout=1.0)
            except RayjetTimeout:
                if wait is not None and time.monotonic() - idle_since >= wait:
                    break
                continue
            idle_since = time.monotonic()
            got += 1
            md = msg.metadata
            if c.wants_json():
                c.emit_line(c.message_dict(msg.subject, md.sequence.stream, msg.data,
                                           msg.headers or None, md.timestamp,
                                           stream=md.stream))
            elif raw:
                typer.get_binary_stream("stdout").write(msg.data + b"\n")
            else:
                out.print(f"[bold][#{got}][/] Received JetStream message: stream: "
                          f"{c.escape(md.stream)} seq {md.sequence.stream} / subject: "
                          f"{c.escape(msg.subject)} / time: {md.timestamp:%H:%M:%S}")
                for k, v in (msg.headers or {}).items():
                    out.print(f"{c.escape(k)}: {c.escape(v)}")
                out.print(c.escape(c.show_data(msg.data)))
                out.print()
    finally:
        subscription.unsubscribe()


def register(app: typer.Typer) -> None:
    c.command(app, "pub")(pub)
    c.command(app, "req")(req)
    c.command(app, "sub")(sub)
