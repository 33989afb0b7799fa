"""Cluster-scoped subject and stream mapping: one virtual stream over several regions.

nats-server maps subjects per cluster (``mappings`` entries with ``cluster: west``), so an
application publishing ``foo.test`` in region west writes to ``foo.west.test`` and one
reading stream ``foo`` reads ``foo-read-west``, without knowing its region. rayjet has no
server between the application and the streams, so the mapping happens in the client:
:class:`ClusterMapping` holds the rules and :func:`regional` wraps a connection with them::

    js_west = regional(js, "west", subjects={"foo.>": "foo.{cluster}.>"},
                       streams={"foo": "foo-read-{cluster}"})
    js_west.publish("foo.test", b"hi")        # stored in foo-write-west as foo.west.test
    js_west.stream_info("foo")                 # info of foo-read-west

A rule's destination is a subject transform destination (``$1``/``{{wildcard(1)}}``
allowed) in which ``{cluster}`` is the region; a dict gives one destination per region (a
region without an entry keeps the subject). The first rule whose source matches wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rayjet.subjects import SubjectTransform

Rule = str | Mapping[str, str]


def _for(rule: Rule, cluster: str) -> str | None:
    if isinstance(rule, str):
        return rule.replace("{cluster}", cluster)
    return rule.get(cluster)


class ClusterMapping:
    def __init__(self, cluster: str, subjects: Mapping[str, Rule] | None = None,
                 streams: Mapping[str, Rule] | None = None) -> None:
        if not cluster:
            raise ValueError("a cluster mapping needs the cluster (region) name")
        self.cluster = cluster
        self._subjects: list[SubjectTransform] = []
        for src, rule in (subjects or {}).items():
            dest = _for(rule, cluster)
            if dest:
                self._subjects.append(SubjectTransform(src, dest))
        self._streams = {name: d for name, rule in (streams or {}).items()
                         if (d := _for(rule, cluster))}

    def subject(self, subject: str) -> str:
        """Where a publish to ``subject`` goes from this cluster."""
        for tr in self._subjects:
            out = tr.match(subject)
            if out:
                return out
        return subject

    def stream(self, name: str | None) -> str | None:
        """The stream that serves ``name`` in this cluster (``name`` itself if unmapped)."""
        if name is None:
            return None
        return self._streams.get(name, name)

    def __repr__(self) -> str:
        return f"ClusterMapping(cluster={self.cluster!r})"


class RegionalJetStream:
    """A connection seen from one cluster: publishes and stream names go through the mapping;
    everything else is the wrapped connection's."""

    def __init__(self, js: Any, mapping: ClusterMapping) -> None:
        self._js = js
        self.mapping = mapping

    @property
    def cluster(self) -> str:
        return self.mapping.cluster

    def __getattr__(self, name: str) -> Any:
        return getattr(self._js, name)

    # -- publishing -------------------------------------------------------------------------
    def publish(self, subject: str, *args: Any, **kwargs: Any) -> Any:
        return self._js.publish(self.mapping.subject(subject), *args, **kwargs)

    def publish_async(self, subject: str, *args: Any, **kwargs: Any) -> Any:
        return self._js.publish_async(self.mapping.subject(subject), *args, **kwargs)

    def publish_batch(self, msgs, **kwargs: Any) -> Any:
        return self._js.publish_batch(
            [(self.mapping.subject(m[0]), *m[1:]) for m in msgs], **kwargs)

    # -- streams ----------------------------------------------------------------------------
    def stream_info(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._js.stream_info(self.mapping.stream(name), *args, **kwargs)

    def get_msg(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._js.get_msg(self.mapping.stream(name), *args, **kwargs)

    def get_last_msg(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._js.get_last_msg(self.mapping.stream(name), *args, **kwargs)

    def delete_msg(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._js.delete_msg(self.mapping.stream(name), *args, **kwargs)

    # -- consumers --------------------------------------------------------------------------
    def add_consumer(self, stream: str, *args: Any, **kwargs: Any) -> Any:
        return self._js.add_consumer(self.mapping.stream(stream), *args, **kwargs)

    def consumer_info(self, stream: str, *args: Any, **kwargs: Any) -> Any:
        return self._js.consumer_info(self.mapping.stream(stream), *args, **kwargs)

    def delete_consumer(self, stream: str, *args: Any, **kwargs: Any) -> Any:
        return self._js.delete_consumer(self.mapping.stream(stream), *args, **kwargs)

    def pull_subscribe(self, subject: str | None = None, durable: str | None = None,
                       stream: str | None = None, **kwargs: Any) -> Any:
        return self._js.pull_subscribe(subject, durable, self.mapping.stream(stream), **kwargs)

    def subscribe(self, subject: str | None = None, durable: str | None = None,
                  stream: str | None = None, **kwargs: Any) -> Any:
        return self._js.subscribe(subject, durable, self.mapping.stream(stream), **kwargs)


def regional(js: Any, cluster: str, *, subjects: Mapping[str, Rule] | None = None,
             streams: Mapping[str, Rule] | None = None) -> RegionalJetStream:
    """``js`` as an application in ``cluster`` sees it (see the module docstring)."""
    return RegionalJetStream(js, ClusterMapping(cluster, subjects, streams))


__all__ = ["ClusterMapping", "RegionalJetStream", "regional"]
