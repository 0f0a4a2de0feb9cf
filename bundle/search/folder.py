"""The counterexample search's private temporary folder, and the sweep of those a dead process left behind.

Each process writes its search databases into one folder of its own,
``$TMPDIR/spider-scoring-search-<pid>-<random>``, removed when the process exits normally. A
process killed, or a pool worker that ends without running its exit handlers, leaves its folder
behind, with half-built databases inside. So the folder holds a lock file its process keeps locked
(``fcntl.flock``) for as long as it lives: the kernel releases the lock when the process ends,
however it ends. When a process makes its folder, it sweeps the others: a folder of this kind,
owned by the same user, whose lock it can take is one whose owner is gone, and is removed; a
folder whose lock is held (a live process, in this container or another sharing the folder), or
that has no lock file (one being made this instant, or one made before this scheme), is left alone.
Where the platform has no ``fcntl`` (Windows), nothing is swept.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; folders are removed at exit only
    fcntl = None  # type: ignore[assignment]

PREFIX = "spider-scoring-search-"
OWNER = ".owner"  # the lock file: locked for the life of the process that made the folder

_lock = threading.Lock()
_made: list[tuple[int, str, object]] = []  # (pid, folder, the open lock file)


class FolderUnavailable(OSError):
    """No folder could be made for the search's databases."""


def folder() -> str:
    """This process's folder (made on first use, in this process: a forked child makes its own)."""
    pid = os.getpid()
    if _made and _made[0][0] == pid and os.path.isdir(_made[0][1]):
        return _made[0][1]
    with _lock:
        if not (_made and _made[0][0] == pid and os.path.isdir(_made[0][1])):
            made, owner = _make_locked(pid)
            _made[:] = [(pid, made, owner)]
            atexit.register(_remove_own, made, pid)
            sweep(os.path.dirname(made), keep=made)
    return _made[0][1]


def _make_locked(pid: int, attempts: int = 5) -> tuple[str, object]:
    """A new folder with its lock file, locked. Between making the lock file and locking it, another
    process's sweep can take the lock and remove the folder as a dead owner's: so the folder is
    checked once the lock is held, and made again if it went."""
    for _ in range(attempts):
        try:
            made = tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-")
            owner = open(os.path.join(made, OWNER), "w")  # noqa: SIM115 - held open for the process's life
        except OSError as exc:
            raise FolderUnavailable(str(exc)) from None
        if fcntl is None:
            return made, owner
        fcntl.flock(owner.fileno(), fcntl.LOCK_EX)  # waits while a sweep holds it: it has removed the folder by then
        try:
            if os.stat(os.path.join(made, OWNER)).st_ino == os.fstat(owner.fileno()).st_ino:
                return made, owner
        except OSError:
            pass  # swept away before the lock was ours
        owner.close()
    raise FolderUnavailable(f"the search folder was removed {attempts} times as it was made, by other processes' sweeps")


def _remove_own(made: str, pid: int) -> None:
    if os.getpid() == pid:  # a forked child inherits exit handlers: never remove its parent's folder
        shutil.rmtree(made, ignore_errors=True)


def sweep(parent: str, keep: str = "") -> list[str]:
    """Remove the search folders in ``parent`` whose owner process is gone (module docstring); the removed."""
    if fcntl is None:
        return []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return []
    removed = []
    for name in names:
        path = os.path.join(parent, name)
        handle = None if path == keep else _unowned(path)
        if handle is not None:
            try:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            finally:
                os.close(handle)
    return removed


def _unowned(path: str) -> int | None:
    """The lock file of ``path``, locked by the caller, when ``path`` is this user's search folder and
    its owner is gone (nobody held the lock); None otherwise."""
    try:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return None
        handle = os.open(os.path.join(path, OWNER), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None  # no lock file: being made now, or made before this scheme
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[union-attr]
    except OSError:
        os.close(handle)
        return None  # held: its owner lives
    return handle
