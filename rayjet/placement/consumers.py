"""Which consumers run inside their stream leader's actor instead of actors of their own.

nats-server keeps ephemeral consumers single-replica by default, on a peer of their stream.
rayjet runs them in the stream leader's process: no process start (a consumer in
milliseconds), reads straight from the leader's store. They go when that leader does, as an
R1 ephemeral goes with its server: ordered consumers (KV and object-store watches,
``rayjet sub``) re-create themselves from the last sequence they delivered.

Interest and work-queue streams keep dedicated consumer actors: their retention hangs on
every consumer's acks, which must outlive a leader change.
"""

from __future__ import annotations

import uuid

from rayjet.api import ConsumerConfig, RetentionPolicy, StreamConfig


def runs_in_stream_leader(cfg: ConsumerConfig, stream: StreamConfig) -> bool:
    """Ephemeral (no durable name), single-replica (``num_replicas`` 0 or 1), on a
    limits-retention stream."""
    return (not cfg.durable_name and cfg.num_replicas <= 1
            and stream.retention is RetentionPolicy.LIMITS)


def ephemeral_name() -> str:
    """A generated consumer name, as nats-server makes one for an unnamed ephemeral."""
    return uuid.uuid4().hex[:22].upper()
