"""Membership changes of a replicated group, called on its leader by the meta group when a
stream or a consumer grows, shrinks or moves. Mixed into the stream and consumer replica
classes (each has ``group``, ``host``, ``id``, ``group_name`` and ``_ensure_started``)."""

from __future__ import annotations

from typing import Any

from rayjet.errors import NotLeaderError, error_for
from rayjet.raft import ConfChange, ConfChangeType

_KINDS = {"learner": ConfChangeType.ADD_LEARNER, "voter": ConfChangeType.ADD_VOTER,
          "remove": ConfChangeType.REMOVE}


class GroupMembershipCalls:
    async def change_membership(self, kind: str, replica_id: str,
                                timeout: float = 30.0) -> list[str]:
        """Add a learner, promote it to voter, or remove a replica; returns the voters."""
        self._ensure_started()
        if not self.group.is_leader:
            self.host.leader_wanted()
            raise NotLeaderError(group=self.group_name, leader=self.group.leader)
        if kind not in _KINDS:
            raise error_for("BAD_REQUEST", err=f"unknown membership change {kind!r}")
        if kind == "remove" and replica_id == self.id:
            raise error_for("BAD_REQUEST", err="transfer leadership before removing the leader")
        await self.host.propose_conf_change(ConfChange(_KINDS[kind], replica_id), timeout)
        return list(self.group.conf_state.voters)

    async def progress(self) -> dict[str, Any]:
        """Leader's view of each member: matched index and the leader's last index."""
        self._ensure_started()
        st = self.group.node.status()
        return {"leader": st.lead, "last_index": st.last_index, "commit": st.commit,
                "progress": st.progress, "voters": list(st.conf_state.voters),
                "learners": list(st.conf_state.learners),
                "match": {nid: pr.match for nid, pr in self.group.node.raft.prs.items()}}

    async def transfer_leadership(self, to: str) -> None:
        self._ensure_started()
        self.host.transfer_leadership(to)
