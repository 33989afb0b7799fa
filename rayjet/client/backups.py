"""Stream backups and restores (``nats stream backup`` / ``restore``) from the Python API.

A backup reads the stream from its leader page by page up to the last sequence it had when
the backup began, then its consumers' configs and delivery states, into one archive
(:mod:`rayjet.storage.backup_archive`). A restore checks the whole archive before it
creates anything, creates the stream, stores the messages at their own sequences through
the stream's log (:mod:`rayjet.engine.restore`), then creates the consumers and gives each
its delivery state. A restore that fails part-way deletes what it created.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from rayjet.api import ConsumerConfig, StreamConfig
from rayjet.api.info import StreamInfo
from rayjet.errors import APIError, StreamNotFoundError, error_for
from rayjet.storage.backup_archive import (
    ArchiveSummary,
    ArchiveWriter,
    BackupDamagedError,
    message_records,
    verify_archive,
)

log = logging.getLogger(__name__)

PAGE_BYTES = 4 << 20  # message bytes per archive record (and per restore op)
PAGE_MSGS = 50_000


@dataclass(frozen=True)
class BackupSummary:
    """What :meth:`BackupsAPI.backup_stream` wrote."""

    stream: str
    path: str
    messages: int
    data_bytes: int
    consumers: int
    size: int  # bytes of the archive


def _restore_error(err: str) -> APIError:
    return error_for("STREAM_RESTORE", err=err)


class BackupsAPI:
    """Mixed into :class:`rayjet.client.JetStream`."""

    # -- backup -------------------------------------------------------------------------------
    def backup_chunks(self, name: str, *, consumers: bool = True,
                      page_bytes: int = PAGE_BYTES) -> Iterator[bytes]:
        """The backup archive of stream ``name``, record by record (the bytes to write or
        send in order). The messages are those up to the stream's last sequence when the
        backup began; consumers (with ``consumers``) are read after the messages."""
        head = self._stream_call(name, "backup_head")
        state = head["state"]
        first, last = int(state.get("first_seq") or 0), int(state.get("last_seq") or 0)
        w = ArchiveWriter()
        yield w.header(head["config"], state, created_ns=int(head.get("created_ns") or 0),
                       first_seq=first, last_seq=last)
        start = max(first, 1)
        while start and start <= last:
            page = self._stream_call(name, "read_range", start, last, max_msgs=PAGE_MSGS,
                                     max_bytes=page_bytes)
            if page["seq"]:
                yield w.messages(page["seq"], page["ts"], page["subject"], page["hdr"],
                                 page["data"])
            start = int(page["next"])
        if head.get("sources"):
            yield w.sources(head["sources"])
        if consumers:
            for cname in self.consumer_names(name):
                try:
                    info = self.consumer_info(name, cname)
                    doc = self._consumer_router(name, cname).call("state_doc",
                                                                   timeout=self.timeout)
                except APIError as exc:  # deleted meanwhile: not part of the backup
                    log.info("consumer %s of %s left out of the backup: %s", cname, name, exc)
                    continue
                yield w.consumer(cname, info.config.to_dict(), doc)
        yield w.end()

    def backup_stream(self, name: str, path: str | os.PathLike, *, consumers: bool = True
                      ) -> BackupSummary:
        """Write stream ``name`` (and its consumers) to the archive file ``path``. The file
        appears whole or not at all (written aside, fsynced, then renamed)."""
        target = Path(path)
        tmp = target.with_name(target.name + ".partial")
        w_size = 0
        try:
            with open(tmp, "wb") as f:
                for chunk in self.backup_chunks(name, consumers=consumers):
                    f.write(chunk)
                    w_size += len(chunk)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        with open(target, "rb") as f:
            summary = verify_archive(f)
        return BackupSummary(name, str(target), summary.messages, summary.data_bytes,
                             len(summary.consumers), w_size)

    # -- restore ------------------------------------------------------------------------------
    def restore_stream(self, source: str | os.PathLike | BinaryIO,
                       config: StreamConfig | dict | None = None) -> StreamInfo:
        """Re-create a stream from a backup archive (a path or a binary file positioned at
        its start): the same messages at the same sequences, the same consumers at the same
        positions. ``config`` replaces the backup's stream config (e.g. another name, as
        ``$JS.API.STREAM.RESTORE`` carries one). A damaged archive is refused before
        anything is created (:class:`~rayjet.errors.APIError` 10062); an existing stream of
        the name gives 10130."""
        if isinstance(source, str | os.PathLike):
            with open(source, "rb") as f:
                return self.restore_stream(f, config)
        start = source.tell()
        try:
            summary = verify_archive(source)
        except BackupDamagedError as exc:
            raise _restore_error(str(exc)) from None
        cfg = self._restore_config(summary, config)
        try:
            self.stream_info(cfg.name)
        except StreamNotFoundError:
            pass
        else:
            raise error_for("STREAM_NAME_EXIST_RESTORE")
        created = cfg.mirror is None and not cfg.sources
        # sourcing starts once the messages are in: it would write beside the restore
        self.add_stream(cfg if created else StreamConfig.from_dict(
            {**cfg.to_dict(), "mirror": None, "sources": None}))
        try:
            source.seek(start)
            self._restore_messages(cfg.name, source, summary)
            if not created:
                self.update_stream(cfg)
            for c in summary.consumers:
                self.add_consumer(cfg.name, ConsumerConfig.from_dict(c.config))
                self._consumer_router(cfg.name, c.name).call("restore_state", c.state,
                                                             timeout=self.timeout)
        except Exception as exc:
            with contextlib.suppress(APIError):
                self.delete_stream(cfg.name)
            if isinstance(exc, APIError) and exc.err_code == 10062:
                raise
            raise _restore_error(f"{type(exc).__name__}: {exc}") from exc
        return self.stream_info(cfg.name)

    @staticmethod
    def _restore_config(summary: ArchiveSummary, config: StreamConfig | dict | None
                        ) -> StreamConfig:
        if config is None:
            raw = summary.config
        elif isinstance(config, StreamConfig):
            return config
        else:
            raw = dict(config)
        try:
            cfg = StreamConfig.from_dict(raw)
        except APIError:
            raise
        except Exception as exc:  # noqa: BLE001 - a config the backup holds must parse
            raise _restore_error(f"the backup's stream config: {exc}") from None
        if cfg.mirror is not None:
            raise _restore_error("a mirror is not restored from a backup: create it again "
                                 "and it copies its origin")
        return cfg

    def _restore_messages(self, name: str, source: BinaryIO, summary: ArchiveSummary) -> None:
        after = 0
        for cols in message_records(source):
            after = self._restore_call(name, after, cols, summary.first_seq, 0, [])
        self._restore_call(name, after, {"seq": [], "ts": [], "subject": [], "hdr": [],
                                         "data": []},
                           summary.first_seq, summary.last_seq, summary.sources or [])

    def _restore_call(self, name: str, after: int, cols: dict[str, list], first: int,
                      last: int, sources: list) -> int:
        expect = max(cols["seq"][-1] if cols["seq"] else 0, last,
                     first - 1 if after == 0 else 0, after)
        try:
            return int(self._stream_call(name, "restore_msgs", after, cols, first, last,
                                         sources, timeout=max(self.timeout, 30)))
        except APIError as exc:
            if exc.err_code == 10062:
                raise
            # the answer was lost (a leader change, a timeout): did the op commit?
            if int(self.stream_info(name).state.last_seq) == expect:
                return expect
            raise
