"""The fault classes of the whole-replica simulator (rayjet.sim.replica), by name.

A run injects every class it is given; the command line takes ``--with`` and
``--without``. The classes in :data:`KNOWN_FAILING` make seeds fail on rayjet as it is
(each shows a rayjet bug, see README.md): they are off unless asked for, and
``tests/sim/test_replica_sim.py`` checks that each still fails on its seed.
"""

from __future__ import annotations

FAULT_CLASSES: dict[str, str] = {
    "crash": "a replica's process dies (its objects are abandoned, its files stay)",
    "crash-before-fsync": "a replica dies between writing a turn's entries and fsyncing "
                          "them (answers held for the fsync never leave)",
    "unsynced-after-restart": "a crashed process's unsynced writes stay unsynced after the "
                              "restart (a power loss later can take them); without it the "
                              "kernel writes them back before the replica restarts",
    "power-one": "power loss on one replica: only what was fsynced survives",
    "power-all": "power loss on every replica at once",
    "torn": "a power loss keeps a random prefix of each file's unsynced growth",
    "flip-store": "bit flips in a store block file of a replica that is down",
    "flip-wal": "bit flips in a raft wal.log (never the sealed bit of a record's length)",
    "flip-wal-sealed-bit": "flip-wal may also flip the sealed bit of a record's length, "
                           "which lies outside its checksum (a quarter of wal flips then do)",
    "flip-snapshot": "bit flips in a raft snapshot.bin",
    "flip-aux": "bit flips in a store's index files or checkpoint",
    "truncate-store": "a store block file cut short",
    "truncate-wal": "a raft wal.log cut short",
    "truncate-snapshot": "a raft snapshot.bin cut short",
    "truncate-aux": "a store index file or checkpoint cut short",
    "wal-damage-after-power-loss": "flip-wal and truncate-wal may hit a replica whose log "
                                   "has not fsynced since it lost power (the cut took its "
                                   "wal.synced claim); without it they wait for that fsync",
    "power-loss-during-store-repair": "a power cut may hit a replica repairing store "
                                      "damage (from the damage until it is well again); "
                                      "without it the cut spares that replica",
    "damage-while-copying": "a file may be damaged while another replica copies its "
                            "store (without it, damage waits until no replica copies)",
    "disk-errors": "ENOSPC or EIO on one replica's writes and/or fsyncs for a while: it "
                   "stops (an exception that does not stop the group is logged and the "
                   "replica goes on, as the actor does), and restarts once the fault clears",
    "partition": "network partitions (one replica cut off, often the leader) and one-way "
                 "links, healed at random",
    "message-loss": "raft messages lost and duplicated at the seed's rates",
}
DAMAGE_CLASSES = ("flip-store", "flip-wal", "flip-snapshot", "flip-aux", "truncate-store",
                  "truncate-wal", "truncate-snapshot", "truncate-aux")
# Fault classes that fail on rayjet as it is (see README.md): off unless asked for.
KNOWN_FAILING: tuple[str, ...] = ("wal-damage-after-power-loss",
                                  "power-loss-during-store-repair", "damage-while-copying")
MUTATIONS = ("no-fsync-before-ack",)  # acknowledge entries the log has not fsynced

__all__ = ["DAMAGE_CLASSES", "FAULT_CLASSES", "KNOWN_FAILING", "MUTATIONS"]
