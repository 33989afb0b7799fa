"""Resting R1 streams stay at rest across a full Ray restart on the same data dir: the
meta places every replica again in the new node's hosts, and one that never ran (no
files) rests there, while a used one starts with its messages."""

from __future__ import annotations

import textwrap

from tests.cluster.restart_phases import run_phases

PHASES = textwrap.dedent("""
    import sys, ray, rayjet
    from rayjet import StreamConfig
    from rayjet.actors.on_demand import replica_dir
    data_dir, phase = sys.argv[1], sys.argv[2]
    # a Ray of its own (others may run on this machine), shut down when the phase ends
    ray.init(address="local", num_cpus=2, namespace="rayjet", log_to_driver=False,
             include_dashboard=False)

    def where(js, stream):
        sa, _ = js._stream(stream, refresh=True)
        return replica_dir(data_dir, sa["group"], sa["peers"][0][0])

    with rayjet.connect(data_dir=data_dir, timeout=30) as js:
        if phase == "make":
            for name in ("UNUSED", "USED"):
                js.add_stream(StreamConfig(name=name, subjects=[name.lower() + ".>"],
                                           hosting="shared"))
            js.publish_batch([("used.a", b"%d" % i) for i in range(5)])
            print("MADE", where(js, "UNUSED").exists(), where(js, "USED").exists())
        else:
            unused, used = js.stream_info("UNUSED"), js.stream_info("USED")
            listed = {n: i.state.messages for n, i in js.stream_infos().items()}
            print("AFTER", unused.state.messages, used.state.messages, listed["UNUSED"],
                  listed["USED"], where(js, "UNUSED").exists(), where(js, "USED").exists())
            ack = js.publish("unused.a", b"first", timeout=30)
            print("USED NOW", ack.seq, js.get_msg("UNUSED", 1).data.decode(),
                  where(js, "UNUSED").exists())
""")


def test_a_resting_stream_stays_at_rest_across_a_full_restart(tmp_path):
    out = run_phases(tmp_path, PHASES, ("make", "check"))
    lines = [ln for ln in out.splitlines() if ln.startswith(("MADE", "AFTER", "USED NOW"))]
    assert lines == ["MADE False True",
                     "AFTER 0 5 0 5 False True",  # placed again: the unused one rests
                     "USED NOW 1 first True"]
