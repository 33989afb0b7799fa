"""The ``rayjet`` command: the nats CLI's JetStream workflows against rayjet on Ray.

Every command takes ``--json`` (machine-readable output), ``--address`` (the Ray cluster:
``auto`` or ``host:port``; default ``$RAY_ADDRESS``, else ``auto``) and ``--timeout``; they
may also be given before the command (``rayjet --json stream ls``). A rayjet error prints its
description, err_code and hint and exits 1; a bad or missing flag exits 2.
"""

from typing import Annotated

import typer

from rayjet.cli import (
    account,
    bench,
    bench_store,  # noqa: F401 - registers `bench kv` and `bench object`
    consumers,
    gateway,
    kv,
    objects,
    pubsub,
    server,
    streams,
)
from rayjet.cli.common import State

app = typer.Typer(
    name="rayjet", no_args_is_help=True, pretty_exceptions_enable=False,
    help="rayjet: NATS JetStream's streams, consumers, KV and object store on Ray.",
    context_settings={"help_option_names": ["-h", "--help"]})


@app.callback()
def main(
    ctx: typer.Context,
    json_: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
    address: Annotated[str | None, typer.Option(
        "--address", help="Ray cluster: 'auto' or host:port (default: $RAY_ADDRESS, else "
        "auto)", show_default=False)] = None,
    data_dir: Annotated[str | None, typer.Option(
        "--data-dir", help="where replicas keep their data when rayjet starts on a cluster "
        "(default: $RAYJET_DATA_DIR, else <tmp>/rayjet-data)", show_default=False)] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.001,
                                           help="seconds to wait for answers")] = 10.0,
) -> None:
    ctx.obj = State(address=address, data_dir=data_dir, timeout=timeout, json=json_)


app.add_typer(server.app, name="server", help="Start, stop and inspect the Ray cluster.")
app.add_typer(streams.app, name="stream", help="Manage streams and their messages.")
app.add_typer(streams.app, name="str", hidden=True)
app.add_typer(consumers.app, name="consumer", help="Manage consumers and read from them.")
app.add_typer(consumers.app, name="con", hidden=True)
app.add_typer(bench.app, name="bench", help="Throughput and latency, optionally beside "
              "nats-server.")
pubsub.register(app)
gateway.register(app)


app.add_typer(kv.app, name="kv", help="Key-value buckets.")
app.add_typer(account.app, name="account", help="What the account uses, and its limits.")
app.add_typer(objects.app, name="object", help="Object store buckets.")
app.add_typer(objects.app, name="obj", hidden=True)

if __name__ == "__main__":  # pragma: no cover
    app()
