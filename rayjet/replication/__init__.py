"""Replication: drive a raft core over a durable log and a state machine (no Ray here)."""

from rayjet.replication.group import Applied, GroupOptions, Output, ReplicaGroup, StateMachine
from rayjet.replication.wal import FileLogStorage, MemoryLog

__all__ = ["Applied", "FileLogStorage", "GroupOptions", "MemoryLog", "Output", "ReplicaGroup",
           "StateMachine"]
