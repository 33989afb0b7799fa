"""Directory durability: a new file or directory survives power loss only once the directory
holding its name is fsynced."""

from __future__ import annotations

import os


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: str | os.PathLike[str]) -> None:
    """``os.makedirs(exist_ok=True)`` whose new directories are durable when it returns."""
    path = os.path.abspath(directory)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    make_dirs(parent)
    try:
        os.mkdir(path)
    except FileExistsError:
        return
    fsync_dir(parent)


__all__ = ["fsync_dir", "make_dirs"]
