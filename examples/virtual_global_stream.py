"""An eventually consistent "virtual global stream" over three regions (seed 004).

Per region R a write stream ``foo-write-R`` on ``foo.R.>`` and a read stream ``foo-read-R``
that sources every write stream and drops the region token (``foo.*.>`` -> ``foo.>``). An
application in region R publishes ``foo.test`` (the client-side cluster mapping sends it to
``foo.R.test``: stored once, in its own region, with low latency) and reads stream ``foo``
(mapped to ``foo-read-R``), which holds every region's messages as ``foo.test``.

A region that is down stops neither the others' writes nor their reads: its write stream
keeps what was published there, and the read streams elsewhere catch up from where they
stopped once it is back (store and forward), so all read streams converge to the same set
of messages (not necessarily in the same order).

Run it with ``python examples/virtual_global_stream.py``. Streams are placed in their region
(``Placement(cluster=R)``) when the Ray cluster has nodes labelled ``rayjet.cluster=R`` for
every region (``ray start --labels='{"rayjet.cluster": "west"}'``); on a single unlabelled
machine they run unplaced, which shows the same data flow.
"""

from __future__ import annotations

import time

import rayjet
from rayjet import StreamConfig
from rayjet.actors.names import stream_actor_name
from rayjet.actors.replica_actors import stop_replica
from rayjet.api.stream import Placement, StreamSource
from rayjet.client.regions import regional
from rayjet.placement import CLUSTER_LABEL

REGIONS = ("west", "central", "east")


def region_placement(js, region: str) -> Placement | None:
    labelled = {n["labels"].get(CLUSTER_LABEL) for n in js.nodes()}
    return Placement(cluster=region) if set(REGIONS) <= labelled else None


def define_streams(js, regions=REGIONS, prefix: str = "foo", replicas: int = 1) -> None:
    """The write and read streams of every region (the seed's JSON definitions)."""
    for region in regions:
        js.add_stream(StreamConfig(
            name=f"{prefix}-write-{region}", subjects=[f"{prefix}.{region}.>"],
            max_age=3600, num_replicas=replicas, placement=region_placement(js, region)))
    for region in regions:
        js.add_stream(StreamConfig(
            name=f"{prefix}-read-{region}", num_replicas=replicas,
            placement=region_placement(js, region),
            subject_transform={"src": f"{prefix}.*.>", "dest": f"{prefix}.>"},
            sources=tuple(StreamSource(name=f"{prefix}-write-{r}",
                                       filter_subject=f"{prefix}.{r}.>") for r in regions)))


def connect_region(js, region: str, prefix: str = "foo"):
    """``js`` as an application deployed in ``region`` sees it."""
    return regional(js, region, subjects={f"{prefix}.>": f"{prefix}.{{cluster}}.>"},
                    streams={prefix: f"{prefix}-read-{{cluster}}"})


def view(js_region, prefix: str = "foo") -> list[tuple[str, bytes]]:
    """What ``nats stream view foo`` shows in a region: (subject, data) of each message."""
    last = js_region.stream_info(prefix).state.last_seq
    out = []
    for seq in range(1, last + 1):
        try:
            m = js_region.get_msg(prefix, seq)
        except rayjet.errors.NotFoundError:
            continue
        out.append((m.subject, m.data))
    return out


def region_down(js, region: str, prefix: str = "foo") -> None:
    """Stop every replica of the region's write stream (what killing its servers does to
    the other regions: the stream cannot be read)."""
    assignment, _ = js._stream(f"{prefix}-write-{region}", refresh=True)
    for rid, _node in assignment["peers"]:
        stop_replica(stream_actor_name(assignment["group"], rid))


def region_up(js, region: str, prefix: str = "foo") -> None:
    """Restart the region's write stream replicas; they recover from their disks."""
    js._meta_call("add_stream", js._stream(f"{prefix}-write-{region}")[0]["config"])


def converge(js, expect: int, regions=REGIONS, prefix: str = "foo", timeout: float = 60.0):
    """Wait until every region's read stream holds the same ``expect`` messages; return them
    (sorted: the regions need not agree on the order)."""
    deadline = time.monotonic() + timeout
    while True:
        views = {r: sorted(view(connect_region(js, r, prefix), prefix)) for r in regions}
        first = next(iter(views.values()))
        if len(first) == expect and all(v == first for v in views.values()):
            return first
        if time.monotonic() > deadline:
            raise TimeoutError({r: len(v) for r, v in views.items()})
        time.sleep(0.3)


def main() -> None:
    with rayjet.connect() as js:
        for name in js.stream_names():
            if name.startswith("foo-"):
                js.delete_stream(name)
        define_streams(js)
        west, central, east = (connect_region(js, r) for r in REGIONS)

        ack = west.publish("foo.test", b"Hello world from the west region")
        print(f"west published foo.test -> {ack.stream} seq {ack.seq}")
        converge(js, 1)
        for r in REGIONS:
            print(f"{r:8} sees", view(connect_region(js, r)))

        print("killing central; east keeps publishing")
        region_down(js, "central")
        east.publish("foo.test", b"Hello world from the east region")
        time.sleep(1)
        print("west    sees", view(west))
        region_up(js, "central")
        converge(js, 2)
        print("central back, sees", view(central))

        print("west and east down; central, isolated, keeps publishing")
        region_down(js, "west")
        region_down(js, "east")
        central.publish("foo.test", b"Hello world from the central region")
        region_up(js, "west")
        region_up(js, "east")
        east.publish("foo.test", b"Hello again from the east region")
        final = converge(js, 4)
        print(f"all regions converged on {len(final)} messages:")
        for subject, data in final:
            print("  ", subject, data.decode())


if __name__ == "__main__":
    main()
