"""The consumer state machine and its pieces.

:mod:`.engine` holds :class:`~.engine.ConsumerEngine`, the deterministic state machine of
one consumer replica; the other modules are what it is built from and what it hands out:
the replicated ops (:mod:`.ops`) and state (:mod:`.state`), the leader's decisions on acks
(:mod:`.acks`), its waiting pull requests (:mod:`.waiting`), how it reads the stream
(:mod:`.reader`), the values it returns (:mod:`.types`) and the column form of a delivery
(:mod:`.delivery_batch`). Import from those modules; this package exports nothing itself.
"""
