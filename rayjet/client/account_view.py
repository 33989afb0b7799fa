"""One account's JetStream: the part of :class:`rayjet.client.JetStream` a protocol server
uses, seen by that account's clients.

The account's stream ``ORDERS`` is ``A~ORDERS`` in the cluster
(:mod:`rayjet.api.account_names`): names given here are qualified on the way in, names in
answers (stream and consumer infos, configurations, PubAcks, errors, delivered messages'
ack subjects) shown as the account knows them, and lists hold the account's streams only.
Publishes are routed by the account's streams, whose subjects are its own.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from rayjet.api import AccountLimits, StorageType, StreamConfig
from rayjet.api.account_names import SEP, belongs, display, qualify
from rayjet.client.column_publish import PubAcks
from rayjet.errors import APIError, BadRequestError, error_for


def _clean(err: APIError, prefix: str) -> APIError:
    if prefix in err.description:
        err.description = err.description.replace(prefix, "")
        err.args = (err.description,)
    return err


class AccountJetStream:
    def __init__(self, js: Any, account: str, limits: Any = None) -> None:
        """``limits``: the account's own (rayjet.auth.JetStreamLimits: its configuration's
        ``jetstream`` block, tiers included), checked here when streams and consumers are
        made; None: the cluster's limits alone."""
        self.account = account
        self.limits = limits
        self.cluster = js  # the whole cluster's connection (monitoring, operators' tools)
        self._js = js.for_account(account)
        self._prefix = qualify(account, "")
        self.timeout = js.timeout

    # -- names --------------------------------------------------------------------------
    def q(self, name: Any) -> Any:
        if not isinstance(name, str) or not name:
            return name
        if SEP in name:
            raise BadRequestError(f"invalid stream name {name!r}: {SEP!r} is reserved")
        return qualify(self.account, name)

    def mine(self, name: str) -> bool:
        return belongs(name, self.account)

    def show(self, obj: Any) -> Any:
        """``obj`` with the cluster's names of this account's streams as it knows them."""
        if isinstance(obj, list | tuple):
            return type(obj)(self.show(o) for o in obj)
        if isinstance(obj, PubAcks):
            obj.rename_streams(display)
            return obj
        if isinstance(obj, dict):
            name = obj.get("stream")
            return ({**obj, "stream": display(name)} if isinstance(name, str) and self._prefix
                    and name.startswith(self._prefix) else obj)
        if isinstance(obj, StreamConfig):
            return dataclasses.replace(
                obj, name=display(obj.name),
                mirror=self._source(obj.mirror) if obj.mirror else obj.mirror,
                sources=tuple(self._source(s) for s in obj.sources or ()))
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            changes = {}
            for field in ("stream", "stream_name", "name"):
                value = getattr(obj, field, None)
                if isinstance(value, str) and value.startswith(self._prefix) and \
                        self._prefix:
                    changes[field] = display(value)
            if isinstance(getattr(obj, "config", None), StreamConfig):  # a StreamInfo
                changes["config"] = self.show(obj.config)
                for field in ("mirror", "sources"):
                    if getattr(obj, field, None):
                        changes[field] = self.show(getattr(obj, field))
            return dataclasses.replace(obj, **changes) if changes else obj
        return obj

    def _source(self, src: Any) -> Any:
        if src.external is None and src.name.startswith(self._prefix):
            return dataclasses.replace(src, name=display(src.name))
        return src

    def _qualified_config(self, cfg: StreamConfig) -> StreamConfig:
        def source(s: Any) -> Any:
            return s if s.external is not None else dataclasses.replace(s, name=self.q(s.name))

        return dataclasses.replace(
            cfg, name=self.q(cfg.name),
            mirror=source(cfg.mirror) if cfg.mirror else cfg.mirror,
            sources=tuple(source(s) for s in cfg.sources or ()))

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.show(fn(*args, **kwargs))
        except APIError as err:
            raise _clean(err, self._prefix) from None

    # -- streams --------------------------------------------------------------------------
    def add_stream(self, config: Any = None, **params: Any) -> Any:
        cfg = _config(config, params)
        self._check_stream(cfg)
        return self._call(self._js.add_stream, self._qualified_config(cfg))

    def _check_stream(self, cfg: StreamConfig) -> None:
        """The account's limits, and those of the tier of the stream's replica count, as
        nats-server checks them: the number of streams, max_bytes required, and what the
        streams of one storage type may reserve (max_bytes times replicas)."""
        if self.limits is None:
            return
        name = qualify(self.account, cfg.name)
        configs = [c for c in self._js.stream_configs() if self.mine(c.name)]
        exists = any(c.name == name for c in configs)
        others = [c for c in configs if c.name != name]
        tier = self.limits.tiers.get(f"R{cfg.num_replicas}")
        for scope, group in ((self.limits, others),
                             (tier, [c for c in others if c.num_replicas == cfg.num_replicas])):
            if scope is None:
                continue
            if not exists and scope.max_streams is not None and \
                    len(group) >= scope.max_streams:
                raise error_for("MAX_STREAMS")
            if scope.max_bytes_required and cfg.max_bytes <= 0:
                raise error_for("STREAM_MAX_BYTES_REQUIRED")
            memory = cfg.storage == StorageType.MEMORY
            cap = scope.memory_max_stream_bytes if memory else scope.storage_max_stream_bytes
            if cap is not None and cfg.max_bytes > cap:
                raise error_for("STREAM_MAX_STREAM_BYTES_EXCEEDED")
            total = scope.max_memory if memory else scope.max_storage
            if total is None or cfg.max_bytes <= 0:
                continue
            reserved = sum(c.max_bytes * c.num_replicas for c in group
                           if c.max_bytes > 0 and (c.storage == StorageType.MEMORY) == memory)
            if reserved + cfg.max_bytes * cfg.num_replicas > total:
                raise error_for("MEMORY_RESOURCES_EXCEEDED" if memory
                                else "STORAGE_RESOURCES_EXCEEDED")

    def add_consumer(self, stream: str, config: Any = None, **params: Any) -> Any:
        if self.limits is not None:
            self._check_consumer(stream, config, params)
        return self._call(self._js.add_consumer, self.q(stream), config, **params)

    def _check_consumer(self, stream: str, config: Any, params: dict[str, Any]) -> None:
        name = (config or {}).get("durable_name") if isinstance(config, dict) else \
            getattr(config, "durable_name", None)
        name = name or params.get("durable_name") or params.get("name")
        if name and name in self._js.consumer_names(self.q(stream)):
            return  # an update, or the same consumer again
        configs = {c.name: c for c in self._js.stream_configs() if self.mine(c.name)}
        mine = configs.get(self.q(stream))
        replicas = mine.num_replicas if mine is not None else 1
        counts = {n: len(self._js.consumer_names(n)) for n in configs}
        tier = self.limits.tiers.get(f"R{replicas}")
        for scope, total in ((self.limits, sum(counts.values())),
                             (tier, sum(k for n, k in counts.items()
                                        if configs[n].num_replicas == replicas))):
            if scope is not None and scope.max_consumers is not None and \
                    total >= scope.max_consumers:
                raise error_for("CONSUMER_MAX_CONSUMERS")

    def account_limits(self) -> AccountLimits:
        if self.limits is None:
            return self._js.account_limits()
        lim = self.limits

        def n(value: int | None) -> int:
            return -1 if value is None else value

        return AccountLimits(max_memory=n(lim.max_memory), max_storage=n(lim.max_storage),
                             max_streams=n(lim.max_streams),
                             max_consumers=n(lim.max_consumers),
                             max_ack_pending=n(lim.max_ack_pending),
                             max_bytes_required=lim.max_bytes_required)

    def update_stream(self, config: Any = None, **params: Any) -> Any:
        cfg = _config(config, params)
        self._check_stream(cfg)
        return self._call(self._js.update_stream, self._qualified_config(cfg))

    def stream_names(self, subject: str | None = None) -> list[str]:
        return [display(n) for n in self._js.stream_names(subject) if self.mine(n)]

    def stream_configs(self, subject: str | None = None, **kwargs: Any) -> list[StreamConfig]:
        return [self.show(c) for c in self._js.stream_configs(subject, **kwargs)
                if self.mine(c.name)]

    def streams_info(self, subject: str | None = None) -> list[Any]:
        return [i for i in self.stream_infos(subject=subject).values()
                if not isinstance(i, APIError)]

    def stream_infos(self, names: Any = None, subject: str | None = None
                     ) -> dict[str, Any]:
        chosen = ([self.q(n) for n in names] if names is not None else
                  [qualify(self.account, n) for n in self.stream_names(subject)])
        out = self._js.stream_infos(chosen)
        return {display(n): (_clean(i, self._prefix) if isinstance(i, APIError)
                             else self.show(i)) for n, i in out.items()}

    async def watch_stream_changes(self, since: int, timeout: float, **kwargs: Any) -> Any:
        applied, configs, removed = await self._js.watch_stream_changes(since, timeout,
                                                                          **kwargs)
        if configs is not None:
            configs = [self.show(c) for c in configs if self.mine(c.name)]
        if removed is not None:
            removed = [display(n) for n in removed if self.mine(n)]
        return applied, configs, removed

    def account_info(self) -> dict[str, Any]:
        used = {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0}
        consumers = 0
        infos = self.streams_info()
        for info in infos:
            kind = "memory" if str(info.config.storage).endswith("memory") else "storage"
            used[kind] += info.state.bytes
            if info.config.max_bytes > 0:
                used["reserved_" + kind] += info.config.max_bytes * info.config.num_replicas
            consumers += info.state.consumer_count
        return {**used, "streams": len(infos), "consumers": consumers,
                "limits": self.account_limits()}

    def restore_stream(self, source: Any, config: Any = None, **kwargs: Any) -> Any:
        if config is None:
            raise BadRequestError("an account's restore names its stream in config")
        return self._call(self._js.restore_stream, source,
                          self._qualified_config(_config(config, {})), **kwargs)

    def find_stream_name_by_subject(self, subject: str) -> str:
        return display(self._call(self._js.find_stream_name_by_subject, subject))

    def publish_batch(self, msgs: Any, **kwargs: Any) -> Any:
        if "stream" in kwargs:
            kwargs["stream"] = self.q(kwargs["stream"])
        return self._call(self._js.publish_batch, msgs, **kwargs)

    def subscribe_republished(self, subject: str = ">", streams: Any = None) -> Any:
        chosen = ([self.q(s) for s in streams] if streams is not None else
                  [qualify(self.account, n) for n in self.stream_names()])
        return self._js.subscribe_republished(subject, chosen)

    def event(self, subject: str, payload: bytes) -> tuple[str, bytes] | None:
        """An advisory of the cluster's event hub as this account sees it, or None when it
        is about another account's streams."""
        if self._prefix not in subject:
            return None
        body = payload.replace(self._prefix.encode(), b"").replace(
            b'"account":"$G"', b'"account":' + json.dumps(self.account).encode())
        return subject.replace(self._prefix, ""), body

    # -- links ------------------------------------------------------------------------------
    def stream_link(self, name: str) -> Any:
        return _StreamLinkView(self, self._call(self._js.stream_link, self.q(name)))

    def consumer_link(self, stream: str, name: str) -> Any:
        return _ConsumerLinkView(self, self._js.consumer_link(self.q(stream), name))

    # -- pass-through ---------------------------------------------------------------------
    def __getattr__(self, attr: str) -> Any:
        if attr in _NAME_FIRST:
            method = getattr(self._js, attr)

            @functools.wraps(method)
            def call(name: Any, *args: Any, **kwargs: Any) -> Any:
                return self._call(method, self.q(name), *args, **kwargs)

            return call
        if attr in _AS_IS:
            return getattr(self._js, attr)
        raise AttributeError(f"an account's JetStream has no {attr!r}")


# methods whose first argument is a stream name
_NAME_FIRST = {
    "stream_info", "delete_stream", "purge_stream", "get_msg", "delete_msg",
    "stream_leader_stepdown", "stream_peer_remove", "direct_read", "backup_chunks",
    "backup_head", "update_consumer", "delete_consumer", "consumer_info",
    "consumers_info", "consumer_infos", "consumer_names", "pause_consumer", "unpin_consumer", "reset_consumer",
    "consumer_leader_stepdown", "get_last_msg", "get_msgs", "stream_replica_health",
    "stream_handle",
}
# the cluster's, whichever account asks (no stream names in them)
_AS_IS = {"meta_cluster", "nodes", "meta_leader_stepdown", "on_close",
          "data_dir", "hosting", "nc"}


def _config(config: Any, params: dict[str, Any]) -> StreamConfig:
    if isinstance(config, StreamConfig):
        return dataclasses.replace(config, **params) if params else config
    return StreamConfig.from_dict({**(config or {}), **params})


class _StreamLinkView:
    def __init__(self, view: AccountJetStream, link: Any) -> None:
        self._view, self._link = view, link

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._link, attr)
        if attr == "name":
            return display(value)
        if not callable(value):
            return value

        @functools.wraps(value)
        async def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return self._view.show(await value(*args, **kwargs))
            except APIError as err:
                raise _clean(err, self._view._prefix) from None

        return call


class _ConsumerLinkView:
    """A consumer's link whose delivered batches name the stream as the account knows it
    (their ack reply subjects carry that name)."""

    def __init__(self, view: AccountJetStream, link: Any) -> None:
        self._view, self._link = view, link

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._link, attr)
        if not callable(value):
            return value

        @functools.wraps(value)
        def call(*args: Any, **kwargs: Any) -> Any:  # blocking, as ConsumerLink's are
            try:
                got = value(*args, **kwargs)
            except APIError as err:
                raise _clean(err, self._view._prefix) from None
            return _rename_batches(got)

        return call


def _rename_batches(got: Any) -> Any:
    if isinstance(got, list | tuple):
        for item in got:
            _rename_batches(item)
    elif hasattr(got, "stream") and hasattr(got, "consumer") and hasattr(got, "which"):
        got.stream = display(got.stream)
    return got


__all__ = ["AccountJetStream"]
