"""The processes of one Ray head on this machine, so `rayjet server stop` stops that head only.

`ray stop` stops every Ray process of the machine: other heads, and the local Ray of any
Python program. A head is found by its control store's port: the `gcs_server` started with
`--gcs_server_port=<port>` names the session; the head's processes carry that session name
(or the control store's address) on their command line, and its workers and agents are
descendants of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True)
class RayHead:
    port: int
    session_name: str
    processes: tuple[psutil.Process, ...]


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def _flag(args: list[str], name: str) -> str | None:
    prefix = f"--{name}="
    return next((a[len(prefix):] for a in args if a.startswith(prefix)), None)


def find_head(port: int) -> RayHead | None:
    """The Ray head whose control store listens on ``port`` here, with all its processes."""
    everyone = list(psutil.process_iter())
    session = None
    for proc in everyone:
        args = _cmdline(proc)
        if args and os.path.basename(args[0]) == "gcs_server" and \
                _flag(args, "gcs_server_port") == str(port):
            session = _flag(args, "session-name")
            break
    if not session:
        return None
    roots: dict[int, psutil.Process] = {}
    for proc in everyone:
        args = _cmdline(proc)
        if any(session in a for a in args) or any(
                (_flag([a], "address") or _flag([a], "gcs-address") or "").endswith(f":{port}")
                for a in args):
            roots[proc.pid] = proc
    found = dict(roots)
    for proc in roots.values():
        try:
            found.update((child.pid, child) for child in proc.children(recursive=True))
        except psutil.NoSuchProcess:
            continue
    found.pop(os.getpid(), None)
    return RayHead(port, session, tuple(found.values()))


def stop_head(head: RayHead, grace: float, force: bool) -> int:
    """Stop ``head`` as `ray stop` orders it: the raylet (its workers go with it), then the
    other processes, the control store last; each step SIGTERMs (SIGKILLs with ``force``)
    and kills what is left after a third of ``grace``. Returns how many processes ran."""
    def kind(proc: psutil.Process) -> int:
        args = _cmdline(proc)
        name = os.path.basename(args[0]) if args else ""
        return 0 if name == "raylet" else 2 if name == "gcs_server" else 1

    procs = [p for p in head.processes if p.is_running()]
    for step in range(3):
        _signal_and_wait([p for p in procs if kind(p) == step], grace / 3, force)
    _signal_and_wait([p for p in procs if p.is_running()], 0, True)  # workers left behind
    return len(procs)


def _signal_and_wait(procs: list[psutil.Process], grace: float, force: bool) -> None:
    for proc in procs:
        try:
            proc.kill() if force else proc.terminate()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=5)


def forget_current_cluster(port: int) -> None:
    """Ray's `address="auto"` reads the last head started here from a file; forget it when it
    names the head just stopped (as `ray stop` does)."""
    from ray._common.utils import get_ray_address_file

    path = Path(get_ray_address_file(None))
    try:
        if path.read_text().strip().endswith(f":{port}"):
            path.unlink()
    except OSError:
        pass


def current_cluster_port() -> int | None:
    """The GCS port of the last head started on this machine (Ray's address file, which
    `ray start --head` writes), or None."""
    from ray._common.utils import get_ray_address_file

    try:
        text = Path(get_ray_address_file(None)).read_text().strip()
    except OSError:
        return None
    _, sep, port = text.rpartition(":")
    return int(port) if sep and port.isdigit() else None


def port_taken(port: int) -> bool:
    """Whether something on this machine listens on ``port`` (any address)."""
    import socket

    for host in ("0.0.0.0", "127.0.0.1"):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return True
    return False


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def choose_port(flag: str, asked: int | None, default: int) -> int:
    """``asked`` when given (ValueError when it is taken), else ``default`` when free, else
    any free port: a second head on a machine must not fail on the first one's ports."""
    if asked is not None:
        if port_taken(asked):
            raise ValueError(f"{flag} {asked} is taken on this machine: choose another")
        return asked
    return default if not port_taken(default) else free_port()


def _last_head_file() -> Path:
    import tempfile

    return Path(os.environ.get("RAYJET_STATE_DIR") or Path(tempfile.gettempdir()) / "rayjet"
                ) / "last-head-port"


def remember_last_head(port: int) -> None:
    """`rayjet server stop` without --port stops the head the last `server start` made."""
    path = _last_head_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{port}\n")
    except OSError:
        pass


def last_head_port() -> int | None:
    """The GCS port of the head the last `rayjet server start` here made, else of the
    last head Ray started here."""
    try:
        text = _last_head_file().read_text().strip()
        if text.isdigit():
            return int(text)
    except OSError:
        pass
    return current_cluster_port()


def forget_last_head(port: int) -> None:
    path = _last_head_file()
    try:
        if path.read_text().strip() == str(port):
            path.unlink()
    except OSError:
        pass
