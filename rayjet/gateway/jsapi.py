"""``$JS.API.*`` requests answered with nats-server's JSON: requests in, response dicts out.

Each handler runs in a worker thread (it makes blocking client calls) and returns the
response document; errors become ``{"error": {"code", "err_code", "description"}}``.
Pull requests (``CONSUMER.MSG.NEXT``) and direct gets answer with messages rather than
JSON, so :mod:`rayjet.gateway.jetstream` serves them itself.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rayjet.api import ConsumerConfig, StreamConfig
from rayjet.api.duration import as_datetime, to_rfc3339
from rayjet.api.headers import get_header
from rayjet.api.stream import SHARED_HOSTING
from rayjet.errors import (
    APIError,
    BadRequestError,
    ConsumerNotFoundError,
    StreamNotFoundError,
    error_for,
)
from rayjet.errors.table import ERRORS
from rayjet.gateway.protocol import SERVER_VERSION
from rayjet.gateway.pull_request import go_kind
from rayjet.subjects import subjects_collide

API_PREFIX = "$JS.API."
NAMES_LIMIT = 1024  # nats-server's JSApiNamesLimit
LIST_LIMIT = 256  # JSApiListLimit
TYPE = "io.nats.jetstream.api.v1."

Handler = Callable[[Any, list[str], dict[str, Any]], dict[str, Any]]

API_LEVEL = 5  # nats-server 2.15.1's JetStream API level (the version the gateway reports)
# metadata keys nats-server keeps for itself: the API level a stream or consumer needs
# (stored, in every config it writes) and the server's version and level (added to the
# answers about one stream or consumer only); a request's own values are dropped
REQ_LEVEL, SERVER_VER, SERVER_LEVEL = "_nats.req.level", "_nats.ver", "_nats.level"
_RESERVED = (REQ_LEVEL, SERVER_VER, SERVER_LEVEL)


REQUIRED_LEVEL_HEADER = "Nats-Required-Api-Level"
_LEVEL = re.compile(r"[+-]?[0-9]+")


def needs_newer_api(hdr: bytes | None) -> bool:
    """Does a request's ``Nats-Required-Api-Level`` ask for more than this server's API
    level? A value that is not a number asks for too much, as nats-server reads it."""
    if not hdr:
        return False
    level = get_header(hdr, REQUIRED_LEVEL_HEADER)
    if not level:
        return False
    return not _LEVEL.fullmatch(level) or int(level) > API_LEVEL


def parse_body(payload: bytes) -> dict[str, Any]:
    if not payload.strip():
        return {}
    try:
        body = json.loads(payload)
    except ValueError as exc:
        raise error_for("INVALID_JSON", err=str(exc)) from None
    if not isinstance(body, dict):
        raise error_for("INVALID_JSON", err="the request must be a JSON object")
    return body


def error_response(err: BaseException, kind: str = "") -> dict[str, Any]:
    if isinstance(err, APIError):
        wire = err.to_wire()
        row = ERRORS.get(err.spec)
        if row is not None and row.err_code == err.err_code and "{" not in row.description:
            # nats-server's own words where its text is fixed: clients match on some
            # ("stream not found" makes the JavaScript client create a KV bucket)
            wire["description"] = row.description
    else:
        wire = {"code": 500, "err_code": 10000, "description": str(err) or type(err).__name__}
    out: dict[str, Any] = {"error": wire}
    if kind:
        out = {"type": TYPE + kind, **out}
    return out


def _name(tokens: list[str], i: int, what: str) -> str:
    if len(tokens) <= i or not tokens[i]:
        raise error_for("BAD_REQUEST", err=f"the subject names no {what}")
    return tokens[i]


def _offset(body: dict[str, Any]) -> int:
    offset = body.get("offset", 0)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise error_for("BAD_REQUEST", err=f"offset must be a non-negative int, not {offset!r}")
    return offset


def _paged(items: list, offset: int, limit: int, key: str) -> dict[str, Any]:
    return {"total": len(items), "offset": offset, "limit": limit,
            key: items[offset:offset + limit]}


# -- asset metadata -------------------------------------------------------------------------
def without_reserved(cfg: dict[str, Any]) -> dict[str, Any]:
    """A requested config without the metadata keys nats-server sets itself."""
    meta = cfg.get("metadata")
    if not isinstance(meta, dict) or not any(k in meta for k in _RESERVED):
        return cfg
    return {**cfg, "metadata": {k: v for k, v in meta.items() if k not in _RESERVED}}


def _stream_level(cfg: dict[str, Any]) -> int:
    """The API level a stream config needs, by the features it uses (as nats-server)."""
    if cfg.get("allow_batched"):
        return 4
    if (cfg.get("allow_msg_counter") or cfg.get("allow_atomic")
            or cfg.get("allow_msg_schedules") or cfg.get("persist_mode") == "async"):
        return 2
    if cfg.get("allow_msg_ttl") or (cfg.get("subject_delete_marker_ttl") or 0) > 0:
        return 1
    return 0


def _consumer_level(cfg: dict[str, Any]) -> int:
    if cfg.get("ack_policy") == "flow_control":
        return 4
    if (cfg.get("pause_until") not in (None, _NO_TIME)
            or cfg.get("priority_policy", "none") != "none" or cfg.get("priority_timeout")
            or cfg.get("priority_groups")):
        return 1
    return 0


def _with_levels(cfg: dict[str, Any], level: int, one: bool) -> None:
    """The config's metadata as nats-server writes it: the user's keys, the level the asset
    needs and, in an answer about this one asset (``one``), the server's version and
    level."""
    meta = {k: v for k, v in (cfg.get("metadata") or {}).items() if k not in _RESERVED}
    meta[REQ_LEVEL] = str(level)
    if one:
        meta[SERVER_VER] = SERVER_VERSION
        meta[SERVER_LEVEL] = str(API_LEVEL)
    cfg["metadata"] = meta


# what nats-server leaves out of a consumer's JSON when zero or false (omitempty)
_CONSUMER_OMIT_ZERO = frozenset({
    "flow_control", "headers_only", "max_batch", "max_bytes", "max_expires", "mem_storage",
    "rate_limit_bps", "max_waiting", "inactive_threshold", "sample_freq", "direct",
    "idle_heartbeat"})
_INFO_OMIT_ZERO = frozenset({"paused", "push_bound"})
EPHEMERAL_INACTIVE = 5.0  # s: nats-server's inactive_threshold of a consumer not durable


def consumer_json(info: Any, *, one: bool = True) -> dict[str, Any]:
    """A ConsumerInfo as nats-server writes it (``one``: an answer about this consumer
    alone, not a list): zero settings left out, a durable's name in its config too."""
    return shape_consumer(info.to_dict(), one=one)


def shape_consumer(out: dict[str, Any], *, one: bool) -> dict[str, Any]:
    """:func:`consumer_json` of a ConsumerInfo's ``to_dict()`` (changed in place)."""
    for key in [k for k in _INFO_OMIT_ZERO if not out.get(k, True)]:
        del out[key]
    cluster = out.get("cluster")
    if isinstance(cluster, dict) and not cluster.get("system_account", True):
        del cluster["system_account"]
    cfg = out.get("config")
    if cfg is not None:
        for key in [k for k, v in cfg.items() if k in _CONSUMER_OMIT_ZERO and v in (False, 0)]:
            del cfg[key]
        if cfg.get("durable_name") and not cfg.get("name"):
            cfg["name"] = cfg["durable_name"]
        _with_levels(cfg, _consumer_level(cfg), one)
    return out


# -- account --------------------------------------------------------------------------------
def account_info(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    """Usage and limits (the gateway adds its request counts and domain)."""
    info = js.account_info()
    return {"memory": info["memory"], "storage": info["storage"],
            "reserved_memory": info["reserved_memory"],
            "reserved_storage": info["reserved_storage"], "streams": info["streams"],
            "consumers": info["consumers"], "limits": info["limits"].to_dict(),
            "api": {"level": API_LEVEL, "total": 0, "errors": 0}}


# -- streams --------------------------------------------------------------------------------
# nats-server 2.15 leaves these out of a stream config when they are false or zero; the
# other settings it always writes, zero or not
_OMIT_ZERO = frozenset({
    "discard_new_per_subject", "allow_msg_schedules", "allow_atomic", "allow_msg_counter",
    "allow_batched", "no_ack", "first_seq", "subject_delete_marker_ttl"})
_ALWAYS = {"max_age": 0, "allow_direct": False, "mirror_direct": False, "sealed": False,
           "deny_delete": False, "deny_purge": False, "allow_rollup_hdrs": False,
           "allow_msg_ttl": False, "compression": "none", "consumer_limits": {}}
SHAPED_KEPT = 10_000  # stream configs kept written as nats-server writes them
_SHAPED: dict[tuple[int, bool], tuple[StreamConfig, dict[str, Any]]] = {}
_NO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time: an empty stream's first and last ts


def stream_json(info: Any, *, created: bool = False, one: bool = True) -> dict[str, Any]:
    """A StreamInfo as nats-server 2.15 writes it: the settings it always writes, zero or
    not, and none of rayjet's own (``hosting``); the metadata levels (``one``: an answer
    about this stream alone, not a list); counts of deleted messages and subjects only
    when there are some; a create answer has no cluster section and says it created
    (nats-server's single-server answer, which says so of an unchanged stream too)."""
    out = info.to_dict(omit=("config",))
    if info.config is not None:
        out = {"config": _shaped_config(info.config, one), **out}
    if out.get("state") is not None:
        shape_stream_state(out["state"])
    if created:
        out.pop("cluster", None)
        out["did_create"] = True
    return out


def _shaped_config(cfg: StreamConfig, one: bool) -> dict[str, Any]:
    """``shape_stream_config(cfg.to_dict())``, made once per config object (they are
    immutable, and a listing's infos share them): most of a listing's time was spent
    writing the same configs again. Not to be changed by the caller."""
    key = (id(cfg), one)
    kept = _SHAPED.get(key)
    if kept is None or kept[0] is not cfg:
        if len(_SHAPED) >= SHAPED_KEPT:
            _SHAPED.clear()
        kept = _SHAPED[key] = (cfg, shape_stream_config(cfg.to_dict(), one=one))
    return kept[1]


def shape_stream_config(cfg: dict[str, Any], *, one: bool) -> dict[str, Any]:
    """A StreamConfig's ``to_dict()`` as nats-server writes it (changed in place)."""
    for key in [k for k, v in cfg.items() if k in _OMIT_ZERO and v in (False, 0)]:
        del cfg[key]
    cfg.pop("hosting", None)
    for key, zero in _ALWAYS.items():
        cfg.setdefault(key, zero)
    _with_levels(cfg, _stream_level(cfg), one)
    return cfg


def shape_stream_state(state: dict[str, Any]) -> dict[str, Any]:
    """A StreamState's ``to_dict()`` as nats-server writes it (changed in place)."""
    for key in ("num_deleted", "num_subjects"):
        if not state.get(key):
            state.pop(key, None)
    state.setdefault("first_ts", _NO_TIME)
    state.setdefault("last_ts", _NO_TIME)
    return state


def _stream_config(tokens: list[str], body: dict[str, Any]) -> StreamConfig:
    name = _name(tokens, 2, "stream")
    if body.get("name") != name:  # missing too (an empty body): nats-server refuses it
        raise APIError("stream name in subject does not match request", code=400,
                       err_code=10056)
    return StreamConfig.from_dict({**without_reserved(body), "name": name})


BUCKET_STREAM_PREFIXES = ("KV_", "OBJ_")


def stream_create(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    cfg = _stream_config(tokens, body)
    if cfg.hosting is None and cfg.name.startswith(BUCKET_STREAM_PREFIXES):
        # a KV or object store bucket, as the Python API makes them: in shared hosts
        cfg = dataclasses.replace(cfg, hosting=SHARED_HOSTING)
    return stream_json(js.add_stream(cfg), created=True)


def stream_update(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    return stream_json(js.update_stream(_stream_config(tokens, body)))


def stream_info(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    info = js.stream_info(_name(tokens, 2, "stream"), body.get("subjects_filter"),
                          bool(body.get("deleted_details")))
    out = stream_json(info)
    subjects = out.get("state", {}).get("subjects")
    if subjects and len(subjects) > 100_000:  # nats-server pages subject counts
        offset = _offset(body)
        keys = sorted(subjects)[offset:offset + 100_000]
        out["state"]["subjects"] = {k: subjects[k] for k in keys}
        out.update(total=len(subjects), offset=offset, limit=100_000)
    else:  # nats-server writes the paging fields always
        out.update(total=0, offset=0, limit=0)
    return out


def stream_delete(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    js.delete_stream(_name(tokens, 2, "stream"))
    return {"success": True}


def stream_purge(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    seq, keep = body.get("seq"), body.get("keep")
    purged = js.purge_stream(_name(tokens, 2, "stream"), body.get("filter") or None,
                             seq or None, keep or None)
    return {"success": True, "purged": purged}


def _names(js: Any, subject: str | None) -> list[str]:
    """Stream names, only those whose subjects overlap ``subject`` when one is given (as
    nats-server filters STREAM.NAMES and STREAM.LIST)."""
    if not subject:
        return sorted(js.stream_names())
    return sorted(c.name for c in js.stream_configs()
                  if any(subjects_collide(subject, s) for s in c.subjects))


def stream_names(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    names = _names(js, body.get("subject") or None)
    return _paged(names, _offset(body), NAMES_LIMIT, "streams")


def stream_list(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    names = _names(js, body.get("subject") or None)
    offset = _offset(body)
    page = names[offset:offset + LIST_LIMIT]
    infos, missing = [], []
    for name, info in js.stream_infos(page).items():
        if isinstance(info, APIError):
            missing.append(name)
        else:
            infos.append(stream_json(info, one=False))
    out = {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "streams": infos}
    if missing:
        out["missing"] = missing
    return out


def stream_msg_get(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    raw = get_message(js, _name(tokens, 3, "stream"), body, direct=False)
    msg = {"subject": raw.subject, "seq": raw.seq,
           "data": raw.to_dict().get("data", ""),
           "time": to_rfc3339(raw.time) if raw.time else None}
    if raw.hdrs:
        msg["hdrs"] = raw.to_dict()["hdrs"]
    return {"message": msg}


def get_request(body: dict[str, Any]) -> dict[str, Any]:
    """A message get's body as ``get_msg``'s arguments (``seq``, ``last_by_subject``,
    ``next_by_subject``); a bad one raises nats-server's error."""
    seq = body.get("seq")
    last = body.get("last_by_subj")
    nxt = body.get("next_by_subj")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 0):
        raise error_for("BAD_REQUEST", err=f"seq must be a sequence number, not {seq!r}")
    if nxt:
        return {"seq": seq or 1, "next_by_subject": nxt}
    if last:
        return {"last_by_subject": last}
    if not seq:
        raise error_for("BAD_REQUEST", err="give seq, last_by_subj or next_by_subj")
    return {"seq": seq}


def no_message_for_bad_subject(exc: BadRequestError, args: dict[str, Any]) -> APIError:
    """A get by a subject no message can have answers nats-server's 10037, not 400."""
    if "seq" in args and len(args) == 1:
        return exc
    if exc.spec != "BAD_SUBJECT" and "subject" not in exc.description:
        return exc
    return error_for("NO_MESSAGE_FOUND")


def get_message(js: Any, stream: str, body: dict[str, Any], *, direct: bool) -> Any:
    args = get_request(body)
    try:
        return js.get_msg(stream, direct=direct, **args)
    except BadRequestError as exc:
        raise no_message_for_bad_subject(exc, args) from None


def stream_msg_delete(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    seq = body.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise error_for("BAD_REQUEST", err=f"seq must be a sequence number, not {seq!r}")
    js.delete_msg(_name(tokens, 3, "stream"), seq, erase=not body.get("no_erase", False))
    return {"success": True}


# -- consumers ------------------------------------------------------------------------------
def _exists(js: Any, stream: str, name: str) -> bool:
    try:
        js.consumer_info(stream, name)
        return True
    except ConsumerNotFoundError:
        return False


def consumer_create(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    """CONSUMER.CREATE.<stream>[.<name>[.<filter>]] and CONSUMER.DURABLE.CREATE.<stream>.<name>."""
    durable_form = tokens[1] == "DURABLE"
    base = 3 if durable_form else 2
    stream = _name(tokens, base, "stream")
    if body.get("stream_name") and body["stream_name"] != stream:
        raise APIError("stream name in subject does not match request", code=400,
                       err_code=10056)
    raw = body.get("config")
    if not isinstance(raw, dict):
        raise error_for("BAD_REQUEST", err="the request needs a consumer config")
    raw = without_reserved(raw)
    cfg = ConsumerConfig.from_dict(raw)
    if cfg.name and cfg.durable_name and cfg.name != cfg.durable_name:
        raise APIError("consumer name in subject does not match durable name in request",
                       code=400, err_code=10017)
    name = tokens[base + 1] if len(tokens) > base + 1 else None
    if name:
        given = cfg.durable_name or cfg.name
        if given and given != name:
            raise APIError("consumer name in subject does not match durable name in request",
                           code=400, err_code=10017)
        if durable_form or cfg.durable_name:
            cfg = ConsumerConfig.from_dict({**raw, "durable_name": name})
        else:
            cfg = ConsumerConfig.from_dict({**raw, "name": name})
    if len(tokens) > base + 2:
        subject_filter = ".".join(tokens[base + 2:])
        if cfg.filter_subject and cfg.filter_subject != subject_filter:
            raise APIError("consumer create request did not match filtered subject from "
                           "create subject", code=400, err_code=10131)
    # nats.py sends 0 for "unset": nats-server gives either its default
    if not cfg.durable_name and not cfg.inactive_threshold:
        cfg = dataclasses.replace(cfg, inactive_threshold=EPHEMERAL_INACTIVE)
    action = body.get("action", "")
    named = cfg.durable_name or cfg.name
    if action == "create" and named and _exists(js, stream, named):
        current = js.consumer_info(stream, named).config.to_dict()
        asked = cfg.to_dict()
        if any(current.get(k) != v for k, v in asked.items()):
            raise error_for("CONSUMER_ALREADY_EXISTS")
    if action == "update":
        if not named or not _exists(js, stream, named):
            raise error_for("CONSUMER_DOES_NOT_EXIST")
        return consumer_json(js.update_consumer(stream, cfg))
    return consumer_json(js.add_consumer(stream, cfg))


def consumer_info(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    return consumer_json(js.consumer_info(_name(tokens, 2, "stream"),
                                          _name(tokens, 3, "consumer")))


def consumer_delete(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    stream, name = _name(tokens, 2, "stream"), _name(tokens, 3, "consumer")
    js.stream_info(stream)  # a missing stream is "stream not found", not consumer
    if not js.delete_consumer(stream, name):
        raise error_for("CONSUMER_NOT_FOUND")
    return {"success": True}


def consumer_names(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    stream = _name(tokens, 2, "stream")
    js.stream_info(stream)
    return _paged(js.consumer_names(stream), _offset(body), NAMES_LIMIT, "consumers")


def consumer_list(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    stream = _name(tokens, 2, "stream")
    js.stream_info(stream)
    names = js.consumer_names(stream)
    offset = _offset(body)
    infos = []
    for info in js.consumer_infos(stream, names[offset:offset + LIST_LIMIT]).values():
        if isinstance(info, ConsumerNotFoundError):
            continue  # deleted meanwhile
        if isinstance(info, APIError):
            raise info
        infos.append(consumer_json(info, one=False))
    return {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "consumers": infos}


def consumer_pause(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    stream, name = _name(tokens, 2, "stream"), _name(tokens, 3, "consumer")
    until = body.get("pause_until")
    when = as_datetime(until, field="pause_until") if until else None
    info = js.pause_consumer(stream, name, when)
    out: dict[str, Any] = {"paused": bool(info.paused)}
    if info.paused and info.config.pause_until is not None:
        out["pause_until"] = to_rfc3339(info.config.pause_until)
        remaining = (info.config.pause_until - datetime.now(UTC)).total_seconds()
        out["pause_remaining"] = max(int(remaining * 1e9), 0)
    else:
        out["pause_until"] = to_rfc3339(datetime.fromtimestamp(0, UTC))
    return out


def consumer_reset(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    """CONSUMER.RESET.<stream>.<consumer> ``{"seq": N}`` (optional): deliver again from
    there; the answer is the consumer's info and ``reset_seq``."""
    seq = body.get("seq")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)
                            or not 0 <= seq < 2**64):
        raise error_for("INVALID_JSON", err=f"json: cannot unmarshal {go_kind(seq, True)} "
                        "into Go struct field JSApiConsumerResetRequest.seq of type uint64")
    info, reset_seq = js.reset_consumer(_name(tokens, 2, "stream"),
                                        _name(tokens, 3, "consumer"), seq or None)
    return {**consumer_json(info), "reset_seq": reset_seq}


def consumer_unpin(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    stream, name = _name(tokens, 2, "stream"), _name(tokens, 3, "consumer")
    js.unpin_consumer(stream, name, body.get("group", ""))
    return {}


# -- leadership -------------------------------------------------------------------------------
def _empty_request(body: dict[str, Any]) -> None:
    if body:  # nats-server's step-downs take no request (a preferred placement is not kept)
        raise error_for("BAD_REQUEST", err="a step-down request carries no body")


def stream_leader_stepdown(js: Any, tokens: list[str], body: dict[str, Any]
                           ) -> dict[str, Any]:
    """STREAM.LEADER.STEPDOWN.<stream>: answered once another replica leads (an R1
    stream's only replica keeps leading, and the answer is a success, as nats-server's)."""
    name = _name(tokens, 3, "stream")
    _empty_request(body)
    js.stream_leader_stepdown(name)
    return {"success": True}


def consumer_leader_stepdown(js: Any, tokens: list[str], body: dict[str, Any]
                             ) -> dict[str, Any]:
    stream, name = _name(tokens, 3, "stream"), _name(tokens, 4, "consumer")
    _empty_request(body)
    js.consumer_leader_stepdown(stream, name)
    return {"success": True}


def stream_peer_remove(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    """STREAM.PEER.REMOVE.<stream> ``{"peer": "<replica id>"}``: a new replica takes the
    place of that one (answered once it has)."""
    name = _name(tokens, 3, "stream")
    peer = body.get("peer")
    if not isinstance(peer, str) or not peer:
        raise error_for("BAD_REQUEST", err="the request names no peer")
    js.stream_peer_remove(name, peer)
    return {"success": True}


def meta_leader_stepdown(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    _empty_request(body)
    js.meta_leader_stepdown()
    return {"success": True}


def not_supported(js: Any, tokens: list[str], body: dict[str, Any]) -> dict[str, Any]:
    """nats-server answers these requests (with an error where they cannot apply); rayjet
    does not serve them, and says so rather than leave the client waiting."""
    raise APIError(f"$JS.API.{'.'.join(tokens)} is not supported by rayjet", code=400,
                   err_code=10003)


# (API tokens after $JS.API) -> (handler, response type, the subject's remaining tokens as
# nats-server subscribes to them: "" none, "*" one, "*.*" two, ">" one or more)
ROUTES: dict[tuple[str, ...], tuple[Handler, str, str]] = {
    ("INFO",): (account_info, "account_info_response", ""),
    ("STREAM", "CREATE"): (stream_create, "stream_create_response", "*"),
    ("STREAM", "UPDATE"): (stream_update, "stream_update_response", "*"),
    ("STREAM", "INFO"): (stream_info, "stream_info_response", "*"),
    ("STREAM", "DELETE"): (stream_delete, "stream_delete_response", "*"),
    ("STREAM", "PURGE"): (stream_purge, "stream_purge_response", "*"),
    ("STREAM", "NAMES"): (stream_names, "stream_names_response", ""),
    ("STREAM", "LIST"): (stream_list, "stream_list_response", ""),
    ("STREAM", "MSG", "GET"): (stream_msg_get, "stream_msg_get_response", "*"),
    ("STREAM", "MSG", "DELETE"): (stream_msg_delete, "stream_msg_delete_response", "*"),
    ("CONSUMER", "CREATE"): (consumer_create, "consumer_create_response", ">"),
    ("CONSUMER", "DURABLE", "CREATE"): (consumer_create, "consumer_create_response", "*.*"),
    ("CONSUMER", "INFO"): (consumer_info, "consumer_info_response", "*.*"),
    ("CONSUMER", "DELETE"): (consumer_delete, "consumer_delete_response", "*.*"),
    ("CONSUMER", "NAMES"): (consumer_names, "consumer_names_response", "*"),
    ("CONSUMER", "LIST"): (consumer_list, "consumer_list_response", "*"),
    ("CONSUMER", "PAUSE"): (consumer_pause, "consumer_pause_response", "*.*"),
    ("CONSUMER", "UNPIN"): (consumer_unpin, "consumer_unpin_response", "*.*"),
    ("CONSUMER", "RESET"): (consumer_reset, "consumer_reset_response", "*.*"),
    ("STREAM", "LEADER", "STEPDOWN"): (stream_leader_stepdown,
                                       "stream_leader_stepdown_response", "*"),
    ("CONSUMER", "LEADER", "STEPDOWN"): (consumer_leader_stepdown,
                                         "consumer_leader_stepdown_response", "*.*"),
    ("META", "LEADER", "STEPDOWN"): (meta_leader_stepdown, "meta_leader_stepdown_response",
                                     ""),
    ("STREAM", "PEER", "REMOVE"): (stream_peer_remove, "stream_remove_peer_response", "*"),
    ("STREAM", "PEER", "EVACUATE"): (not_supported, "stream_evacuate_peer_response", "*"),
    ("STREAM", "CANCEL_MOVE"): (not_supported, "stream_cancel_move_response", "*"),
}


def _fits(rest: list[str], pattern: str) -> bool:
    if pattern == ">":
        return len(rest) >= 1
    return len(rest) == (len(pattern.split(".")) if pattern else 0)


def route_for(tokens: list[str]) -> tuple[Handler, str] | None:
    """The handler for API ``tokens`` (the subject after ``$JS.API.``); None where
    nats-server has no subscription for the subject (the request goes unanswered)."""
    for n in (3, 2, 1):
        hit = ROUTES.get(tuple(tokens[:n])) if len(tokens) >= n else None
        if hit is not None and _fits(tokens[n:], hit[2]):
            return hit[0], hit[1]
    return None


def not_enabled(tokens: list[str]) -> dict[str, Any] | None:
    """nats-server's answer to an API request from an account without JetStream (None:
    a subject it does not serve)."""
    hit = route_for(tokens)
    if hit is None:
        return None
    out = error_response(error_for("JETSTREAM_NOT_ENABLED_FOR_ACCOUNT"), hit[1])
    if hit[1] in _PAGED_KINDS:  # their response types embed the paging fields
        out.update(total=0, offset=0, limit=0)
    return out


_PAGED_KINDS = {"stream_info_response", "stream_names_response", "stream_list_response",
                "consumer_names_response", "consumer_list_response"}


def answer(js: Any, tokens: list[str], payload: bytes, hdr: bytes | None = None
           ) -> dict[str, Any] | None:
    """The response document of one API request (``tokens`` after ``$JS.API.``, ``hdr``
    its header block); None for a subject nats-server does not serve, which it leaves
    unanswered."""
    hit = route_for(tokens)
    if hit is None:
        return None
    handler, kind = hit
    try:
        if needs_newer_api(hdr):  # before anything else, as nats-server checks it
            if handler is consumer_reset:  # the consumer answers (a missing one nobody)
                js.consumer_info(_name(tokens, 2, "stream"), _name(tokens, 3, "consumer"))
            raise error_for("REQUIRED_API_LEVEL")
        return {"type": TYPE + kind, **handler(js, tokens, parse_body(payload))}
    except (ConsumerNotFoundError, StreamNotFoundError) as exc:
        if handler is consumer_reset:
            return None  # nats-server: only the consumer listens on its reset subject
        return error_response(exc, kind)
    except Exception as exc:  # noqa: BLE001 - every failure is an API error response
        out = error_response(exc, kind)
        if handler is consumer_reset:
            out["reset_seq"] = 0  # nats-server writes it in its errors too
        return out
