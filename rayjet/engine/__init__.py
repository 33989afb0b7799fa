"""Deterministic stream state machine: checks on the leader, ops applied on every replica."""

from rayjet.engine.batch import MAX_BATCH_SIZE, BatchCollector
from rayjet.engine.ops import (
    AckOp,
    BatchOp,
    ConsumerOp,
    DeleteOp,
    MsgOp,
    MsgRunOp,
    Op,
    PurgeOp,
    SkipOp,
    UpdateConfigOp,
    decode_op,
    encode_op,
)
from rayjet.engine.results import ApplyResult, ExpireResult, Republish
from rayjet.engine.storeconf import store_config, updated_store_config
from rayjet.engine.stream import StreamEngine

__all__ = [
    "MAX_BATCH_SIZE",
    "AckOp",
    "ApplyResult",
    "BatchCollector",
    "BatchOp",
    "ConsumerOp",
    "DeleteOp",
    "ExpireResult",
    "MsgOp",
    "MsgRunOp",
    "Op",
    "PurgeOp",
    "Republish",
    "SkipOp",
    "StreamEngine",
    "UpdateConfigOp",
    "decode_op",
    "encode_op",
    "store_config",
    "updated_store_config",
]
