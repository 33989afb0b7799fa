"""Stream backup and restore over the wire (``$JS.API.STREAM.SNAPSHOT`` / ``RESTORE``, as
``nats stream backup`` / ``restore`` drive them) through the rayjet gateway beside
nats-server, measured in one run.

    .venv/bin/python benchmarks/backup.py --quick     # 50k messages
    .venv/bin/python benchmarks/backup.py             # 500k messages

The same nats-py code fills an R1 file stream with 128 B messages, snapshots it (128 KiB
chunks, each acked as the nats CLI acks them), deletes it and restores it from the bytes it
got. Throughput is the stream's message bytes per second; the ratio is rayjet / nats-server
(> 1: rayjet is faster). The archive formats differ (rayjet's is its own), so the archive
sizes are shown too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import natsbase as nb  # noqa: E402
from benchmarks.gateway import _gateway  # noqa: E402

CHUNK = 128 * 1024


async def _fill(js, name: str, count: int, size: int) -> None:
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    payload = os.urandom(size)
    pending = []
    for i in range(count):
        pending.append(await js.publish_async(f"{name}.{i % 16}", payload))
        if len(pending) >= 2000:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)


async def _snapshot(nc, name: str) -> tuple[dict, bytes]:
    inbox = nc.new_inbox()
    data = bytearray()
    done = asyncio.get_running_loop().create_future()

    async def take(m):
        data.extend(m.data)
        if m.reply:
            await nc.publish(m.reply, b"")
        if not m.data and not done.done():
            done.set_result((m.headers or {}).get("Status"))

    sub = await nc.subscribe(inbox, cb=take)
    answer = json.loads((await nc.request(f"$JS.API.STREAM.SNAPSHOT.{name}", json.dumps(
        {"deliver_subject": inbox, "chunk_size": CHUNK}).encode(), timeout=30)).data)
    if "error" in answer:
        raise SystemExit(f"snapshot refused: {answer['error']}")
    status = await asyncio.wait_for(done, 600)
    await sub.unsubscribe()
    if status not in (None, "204"):
        raise SystemExit(f"snapshot ended with {status}")
    return answer, bytes(data)


async def _restore(nc, name: str, config: dict, archive: bytes) -> dict:
    answer = json.loads((await nc.request(f"$JS.API.STREAM.RESTORE.{name}", json.dumps(
        {"config": config}).encode(), timeout=30)).data)
    subject = answer["deliver_subject"]
    for i in range(0, len(archive), CHUNK):
        await nc.request(subject, archive[i:i + CHUNK], timeout=30)
    return json.loads((await nc.request(subject, b"", timeout=600)).data)


async def _run(url: str, count: int, size: int) -> dict[str, float]:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    name = "BACKUPBENCH"
    try:
        await _fill(js, name, count, size)
        t = time.perf_counter()
        answer, archive = await _snapshot(nc, name)
        backup_s = time.perf_counter() - t
        await js.delete_stream(name)
        t = time.perf_counter()
        created = await _restore(nc, name, answer["config"], archive)
        restore_s = time.perf_counter() - t
        if created.get("error") or created["state"]["messages"] != count:
            raise SystemExit(f"restore gave {created}")
        await js.delete_stream(name)
        return {"backup_s": backup_s, "restore_s": restore_s, "archive": len(archive)}
    finally:
        await nc.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="50k messages")
    ap.add_argument("--count", type=int)
    args = ap.parse_args(argv)
    count = args.count or (50_000 if args.quick else 500_000)
    size = nb.DEFAULT_SIZE
    with _gateway("shared") as url:
        ours = asyncio.run(_run(url, count, size))
    with nb.NatsServer() as srv:
        theirs = asyncio.run(_run(srv.urls[0], count, size))
    mb = count * size / 1e6
    rows = []
    for what in ("backup", "restore"):
        a, b = mb / ours[f"{what}_s"], mb / theirs[f"{what}_s"]
        rows.append([what, f"{a:,.1f} MB/s ({ours[what + '_s']:.2f} s)",
                     f"{b:,.1f} MB/s ({theirs[what + '_s']:.2f} s)",
                     nb.fmt_ratio(nb.ratio(a, b))])
    rows.append(["archive size", f"{ours['archive'] / 1e6:,.1f} MB",
                 f"{theirs['archive'] / 1e6:,.1f} MB", ""])
    nb.print_table(["what", "rayjet gateway", f"nats-server {nb.nats_server_version()}",
                    "ratio"], rows,
                   title=f"nats-py {nb.nats_py_version()}, R1 file, {count:,} x {size} B "
                         f"messages ({mb:,.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
