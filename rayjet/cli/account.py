"""``rayjet account ...``: what the account uses and its JetStream limits (info, limits)."""

from typing import Annotated, Any

import typer

from rayjet.cli import common as c

app = typer.Typer(no_args_is_help=True)

Limit = Annotated[str | None, typer.Option(show_default=False)]  # a size or a count


def _limit_rows(limits: Any) -> list[tuple[str, str]]:
    def size(n: int) -> str:
        return "unlimited" if n < 0 else c.human_bytes(n)

    def count(n: int) -> str:
        return "unlimited" if n < 0 else f"{n:,}"

    return [("Max Memory", size(limits.max_memory)), ("Max Storage", size(limits.max_storage)),
            ("Max Streams", count(limits.max_streams)),
            ("Max Consumers", count(limits.max_consumers)),
            ("Max Ack Pending", count(limits.max_ack_pending)),
            ("Max Memory Stream", size(limits.memory_max_stream_bytes)),
            ("Max File Stream", size(limits.storage_max_stream_bytes)),
            ("Max Bytes Required", str(limits.max_bytes_required).lower())]


@c.command(app, "info")
def info() -> None:
    """What the account's streams use, and its limits."""
    js = c.connect()
    got = js.account_info()
    if c.wants_json():
        c.emit_json({**got, "limits": got["limits"].to_dict()})
        return
    usage = [("Memory", c.human_bytes(got["memory"])), ("Storage", c.human_bytes(got["storage"])),
             ("Reserved Memory", c.human_bytes(got["reserved_memory"])),
             ("Reserved Storage", c.human_bytes(got["reserved_storage"])),
             ("Streams", f"{got['streams']:,}"), ("Consumers", f"{got['consumers']:,}")]
    c.print_renderables(c.kv_table(usage, title="Account Usage"),
                        c.kv_table(_limit_rows(got["limits"]), title="Account Limits"))


@c.command(app, "limits")
def limits(
    max_memory: Limit = None,
    max_storage: Limit = None,
    max_streams: Limit = None,
    max_consumers: Limit = None,
    max_ack_pending: Limit = None,
    memory_max_stream_bytes: Limit = None,
    storage_max_stream_bytes: Limit = None,
    max_bytes_required: Annotated[bool | None, typer.Option(
        "--max-bytes-required/--no-max-bytes-required", show_default=False,
        help="every stream must set max_bytes")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="lift every limit")] = False,
) -> None:
    """Show the account's JetStream limits, or change the ones given (sizes as 64MB, counts
    as 10, -1 for none); they apply to what is created or changed from then on."""
    sizes = {"max_memory": max_memory, "max_storage": max_storage,
             "memory_max_stream_bytes": memory_max_stream_bytes,
             "storage_max_stream_bytes": storage_max_stream_bytes}
    counts = {"max_streams": max_streams, "max_consumers": max_consumers,
              "max_ack_pending": max_ack_pending}
    changes: dict[str, Any] = {
        **{k: c.parse_size(v, "--" + k.replace("_", "-")) for k, v in sizes.items()
           if v is not None},
        **{k: c.parse_count(v, "--" + k.replace("_", "-")) for k, v in counts.items()
           if v is not None}}
    if max_bytes_required is not None:
        changes["max_bytes_required"] = max_bytes_required
    if clear and changes:
        c.usage_error("--clear lifts every limit: give no others with it")
    js = c.connect()
    if clear:
        from rayjet import AccountLimits

        now = js.set_account_limits(AccountLimits())
    elif changes:
        now = js.set_account_limits(js.account_limits(), **changes)
    else:
        now = js.account_limits()
    if c.wants_json():
        c.emit_json(now.to_dict())
    else:
        c.print_renderables(c.kv_table(_limit_rows(now), title="Account Limits"))
