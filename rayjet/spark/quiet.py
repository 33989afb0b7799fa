"""Ray Data executions without Ray Data's console output, for the datasets rayjet makes.

Ray Data prints, for every execution, a start line, its plan, progress bars (or, when
stdout is not a terminal, a block of progress lines every few seconds) and a finish line.
``rayjet.spark`` turns these off for its own datasets (``progress=False``, the default):
through the dataset's own ``DataContext`` (a copy made when the dataset was created and
shared by the datasets derived from it), never the process-wide one, so a user's other
datasets keep their settings. The finish line and Ray Data's one-time hint that progress
bars are off are logged whatever the context says; a filter marks those records, for these
datasets only, with Ray Data's own ``hide`` flag: they still reach Ray Data's log file
(``ray-data.log`` in the session's log directory), not the console. Warnings and errors
are never hidden.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ray.data import DataContext

QUIET_KEY = "rayjet.quiet"
# DataContext fields that make Ray Data print while it executes, and their quiet values
QUIET_SETTINGS = {
    "enable_progress_bars": False,
    "print_on_execution_start": False,
    "enable_auto_log_stats": False,
}
_LOGGERS = ("ray.data._internal.execution.streaming_executor", "ray.data._internal.progress")
_PROGRESS_OFF_HINT = "Progress bars disabled"
_STACK_DEPTH = 16


def _quiet_context_on_stack() -> bool:
    """Whether the code logging now runs for a DataContext rayjet made quiet (Ray Data's
    executor holds it as ``self._data_context``, its progress set-up as ``ctx``)."""
    frame = sys._getframe(2)
    for _ in range(_STACK_DEPTH):
        if frame is None:
            return False
        local = frame.f_locals
        ctx = local.get("ctx")
        if not isinstance(ctx, DataContext):
            ctx = getattr(local.get("self"), "_data_context", None)
        if isinstance(ctx, DataContext):
            return bool(ctx.get_config(QUIET_KEY, False))
        frame = frame.f_back
    return False


class _HideQuietRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        hint = record.levelno == logging.WARNING and str(record.msg).startswith(
            _PROGRESS_OFF_HINT)
        if (record.levelno <= logging.INFO or hint) and _quiet_context_on_stack():
            record.hide = True  # Ray Data's console handler skips it; its log file keeps it
        return True


_FILTER = _HideQuietRecords()


def _install_filter() -> None:
    for name in _LOGGERS:
        log = logging.getLogger(name)
        if _FILTER not in log.filters:
            log.addFilter(_FILTER)


def make_quiet(ctx: DataContext) -> None:
    """Turn Ray Data's console output off for the datasets using ``ctx``."""
    for field, value in QUIET_SETTINGS.items():
        setattr(ctx, field, value)
    ctx.set_config(QUIET_KEY, True)
    _install_filter()


def quiet_dataset(ds: Any, progress: bool = False) -> Any:
    """``ds`` (and the datasets derived from it) executing without Ray Data's progress
    output, unless ``progress``; returns ``ds``."""
    if not progress:
        make_quiet(ds.context)
    return ds


@contextmanager
def quiet_execution(ds: Any, progress: bool = False) -> Iterator[Any]:
    """Execute ``ds`` (a dataset rayjet did not make) quietly inside the block, then give
    its context back the settings it had."""
    if progress:
        yield ds
        return
    ctx = ds.context
    saved = {field: getattr(ctx, field) for field in QUIET_SETTINGS}
    flag = ctx.get_config(QUIET_KEY, None)
    make_quiet(ctx)
    try:
        yield ds
    finally:
        for field, value in saved.items():
            setattr(ctx, field, value)
        if flag is None:
            ctx.remove_config(QUIET_KEY)
        else:
            ctx.set_config(QUIET_KEY, flag)


__all__ = ["QUIET_KEY", "QUIET_SETTINGS", "make_quiet", "quiet_dataset", "quiet_execution"]
