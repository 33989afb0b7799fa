"""What the replica simulator checks: acknowledged messages and the replicas' stores.

A message is acknowledged when its proposer (the leader) applied the entry carrying it with
an ok result, or when the leader answered a publish with the duplicate PubAck of an
earlier copy (the client then holds a PubAck naming that seq). From then on:

- the message stays readable at its seq with its exact bytes on every leader that serves
  writes (checked when one starts serving, every few ticks, and at the end);
- no two different acknowledged messages ever share a seq;
- no replica holds bytes at a seq other than the acknowledged ones, nor bytes nobody
  published, nor one published message at two seqs (the Nats-Msg-Id window covers the
  whole run, and a message without an id is never sent twice);
- at the end every replica holds exactly the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from rayjet.errors import APIError, NotFoundError
from rayjet.sim.checker import Violation


@dataclass(frozen=True)
class Msg:
    """One published message: distinct bytes; a retry resends the same object."""

    k: int
    subject: str
    data: bytes
    msg_id: str = ""


class StreamChecker:
    def __init__(self) -> None:
        self.acked: dict[int, Msg] = {}  # seq -> the message acknowledged there
        self.published: dict[bytes, Msg] = {}  # data -> message (every data is distinct)
        self.acked_data: set[bytes] = set()
        self.acked_term: dict[int, int] = {}  # seq -> the first term a leader acknowledged it
        self.checks = 0  # stores read in full
        self.reads = 0  # messages read

    def publish(self, msg: Msg) -> None:
        self.published[msg.data] = msg

    def ack(self, seq: int, msg: Msg, term: int, where: str) -> None:
        """``msg`` was acknowledged at ``seq`` by the leader of ``term``."""
        old = self.acked.get(seq)
        if old is not None and old.data != msg.data:
            raise Violation(f"two acknowledged messages at seq {seq}: m{old.k} and m{msg.k} "
                            f"({where})")
        self.acked[seq] = msg
        self.acked_term[seq] = min(term, self.acked_term.get(seq, term))
        self.acked_data.add(msg.data)

    @staticmethod
    def contents(store) -> tuple[dict[int, tuple[str, bytes]], dict[int, str]]:
        """Every message ``store`` holds (seq -> (subject, data)) and the seqs it cannot read
        (seq -> the error)."""
        st = store.fast_state()
        out: dict[int, tuple[str, bytes]] = {}
        bad: dict[int, str] = {}
        if not st.last_seq or not st.msgs:
            return out, bad
        start, end = max(1, st.first_seq), st.last_seq
        while start and start <= end:
            try:
                batch, nxt = store.read_columns(start, end, max_msgs=100_000,
                                                max_bytes=1 << 40)
            except APIError:
                # a lost or unreadable seq: read one at a time from here to find it
                for seq in range(start, end + 1):
                    try:
                        m = store.load_msg(seq)
                    except NotFoundError:
                        continue  # a gap (nothing was ever stored there)
                    except APIError as exc:
                        bad[seq] = f"{type(exc).__name__}: {exc}"
                        continue
                    out[seq] = (m.subject, m.data)
                break
            cols = batch.to_pydict()
            for seq, subject, data in zip(cols["seq"], cols["subject"], cols["data"]):
                out[seq] = (subject, data)
            start = nxt
        return out, bad

    def check_store(self, store, who: str, *, term: int | None = None
                    ) -> dict[int, tuple[str, bytes]]:
        """Check one replica's store; with ``term`` it is the leader of that term taking
        writes, so every message acknowledged in that term or before must be there (a
        leader cut off in an old term knows nothing of what a newer one acknowledged)."""
        self.checks += 1
        have, bad = self.contents(store)
        self.reads += len(have)
        seen: dict[bytes, int] = {}
        for seq, (subject, data) in have.items():
            msg = self.published.get(data)
            if msg is None:
                raise Violation(f"{who} holds bytes nobody published at seq {seq}: "
                                f"{data[:40]!r}")
            if msg.subject != subject:
                raise Violation(f"{who} holds m{msg.k} at seq {seq} under subject {subject!r}, "
                                f"published on {msg.subject!r}")
            acked = self.acked.get(seq)
            if acked is not None and acked.data != data:
                raise Violation(f"{who} serves m{msg.k} at seq {seq}, where m{acked.k} was "
                                f"acknowledged")
            if data in seen:
                raise Violation(f"{who} holds m{msg.k} twice: at seqs {seen[data]} and {seq}")
            seen[data] = seq
        if term is not None:
            for seq, msg in self.acked.items():
                if seq not in have and self.acked_term[seq] <= term:
                    why = bad.get(seq, "no message there")
                    raise Violation(f"{who} lost acknowledged m{msg.k} at seq {seq}: {why}")
        return have

    def check_seq(self, store, seq: int, who: str) -> None:
        """The leader that just acknowledged ``seq`` reads it back."""
        msg = self.acked[seq]
        self.reads += 1
        try:
            m = store.load_msg(seq)
        except APIError as exc:
            raise Violation(f"{who} acknowledged m{msg.k} at seq {seq} but cannot read it: "
                            f"{exc}") from None
        if m.data != msg.data or m.subject != msg.subject:
            raise Violation(f"{who} acknowledged m{msg.k} at seq {seq} but holds "
                            f"{m.data[:40]!r} there")

    def converge(self, stores: dict[str, object]) -> int:
        """At the end: every replica holds exactly the same messages, each acknowledged one
        among them with its bytes. Returns how many messages they hold."""
        contents = {name: self.check_store(store, f"{name} (healed)", term=1 << 62)
                    for name, store in stores.items()}
        names = sorted(contents)
        first = contents[names[0]]
        for name in names[1:]:
            other = contents[name]
            if other != first:
                only_a = sorted(set(first) - set(other))[:5]
                only_b = sorted(set(other) - set(first))[:5]
                differ = sorted(s for s in set(first) & set(other) if first[s] != other[s])[:5]
                raise Violation(f"replicas differ after healing: {names[0]} has "
                                f"{len(first)} messages, {name} {len(other)}; seqs only on "
                                f"{names[0]} {only_a}, only on {name} {only_b}, different "
                                f"{differ}")
        return len(first)


__all__ = ["Msg", "StreamChecker", "Violation"]
