"""The meta group's state machine: the catalogue of streams, consumers and their replicas."""

from rayjet.meta.catalogue import (
    Catalogue,
    ConsumerAssignment,
    MetaOp,
    Peers,
    StreamAssignment,
    as_peers,
    decode_meta_op,
    encode_meta_op,
    next_replica_after,
    replica_number,
)

__all__ = [
    "Catalogue",
    "ConsumerAssignment",
    "MetaOp",
    "Peers",
    "StreamAssignment",
    "as_peers",
    "decode_meta_op",
    "encode_meta_op",
    "next_replica_after",
    "replica_number",
]
