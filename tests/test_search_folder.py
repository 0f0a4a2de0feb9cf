"""The counterexample search's temporary folders (bundle/search/folder.py): nothing left behind by a
killed or pooled process, and nothing of a live one ever removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bundle.search import folder as search_folder

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(search_folder.fcntl is None, reason="no fcntl on this platform: nothing is swept")

# Makes its folder, says where, then ends as told: "exit" (exit handlers run), "abrupt" (os._exit,
# as a pool worker ends, or a kill), or "wait" (lives until its stdin closes).
OWNER = """
import os, sys
sys.path.insert(0, {root!r})
from bundle.search import folder as search_folder
folder = search_folder.folder()
open(os.path.join(folder, "half-built.sqlite"), "wb").write(b"x" * 100)
print(folder, flush=True)
how = sys.argv[1]
if how == "abrupt":
    os._exit(0)
if how == "wait":
    sys.stdin.read()
"""


def owner(tmp_path: Path, how: str) -> tuple[subprocess.Popen, Path]:
    process = subprocess.Popen([sys.executable, "-c", OWNER.format(root=str(ROOT)), how], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=dict(os.environ, TMPDIR=str(tmp_path)))
    folder = Path(process.stdout.readline().strip())  # type: ignore[union-attr]
    assert folder.parent == tmp_path and folder.name.startswith(f"{search_folder.PREFIX}{process.pid}-")
    return process, folder


def test_a_normal_exit_removes_the_folder(tmp_path):
    process, folder = owner(tmp_path, "exit")
    process.wait()
    assert not folder.exists()


def test_a_folder_whose_owner_ended_abruptly_is_swept_by_a_later_process(tmp_path):
    process, folder = owner(tmp_path, "abrupt")
    process.wait()
    assert folder.exists()  # left behind: no exit handler ran
    later, mine = owner(tmp_path, "exit")  # a later process sweeps when it makes its own folder
    later.wait()
    assert not folder.exists() and not mine.exists()


def test_a_live_owners_folder_is_never_swept(tmp_path):
    process, folder = owner(tmp_path, "wait")
    try:
        assert search_folder.sweep(str(tmp_path)) == []
        assert (folder / "half-built.sqlite").exists()
    finally:
        process.communicate("")
    assert not folder.exists()  # removed by its owner at exit


def test_folders_it_cannot_vouch_for_are_left_alone(tmp_path):
    legacy = tmp_path / f"{search_folder.PREFIX}abcd1234"  # made before the lock file: its owner is unknown
    legacy.mkdir()
    stray = tmp_path / f"{search_folder.PREFIX}file"
    stray.write_text("not a folder")
    other = tmp_path / "unrelated"
    other.mkdir()
    (other / search_folder.OWNER).write_text("")
    assert search_folder.sweep(str(tmp_path)) == []
    assert legacy.is_dir() and stray.is_file() and other.is_dir()


def test_a_forked_child_makes_its_own_folder_and_leaves_its_parents(tmp_path):
    script = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from bundle.search import folder as search_folder
parent = search_folder.folder()
pid = os.fork()
if pid == 0:
    child = search_folder.folder()
    print(child != parent and os.path.isdir(parent), flush=True)
    sys.exit(0)  # runs the exit handlers it inherited: the parent's folder must survive them
os.waitpid(pid, 0)
print(os.path.isdir(parent), flush=True)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ, TMPDIR=str(tmp_path)), check=True)
    assert done.stdout.split() == ["True", "True"]
    assert list(tmp_path.iterdir()) == []  # the parent's removed at its exit, the child's at its own


def test_a_sweep_between_making_the_lock_file_and_locking_it_does_not_lose_the_folder(tmp_path, monkeypatch):
    """Another process's sweep can take a new folder's lock before its maker does, and remove it as a
    dead owner's: the maker, once it holds the lock, sees the folder gone and makes another."""
    real_flock, swept = search_folder.fcntl.flock, []

    def flock(fd, operation):
        if operation == search_folder.fcntl.LOCK_EX and not swept:  # the maker, before its first lock
            swept.extend(search_folder.sweep(str(tmp_path)))  # as another process would, this instant
        return real_flock(fd, operation)

    monkeypatch.setattr(search_folder.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(search_folder.fcntl, "flock", flock)
    monkeypatch.setattr(search_folder, "_made", [])
    made = Path(search_folder.folder())
    assert len(swept) == 1 and not Path(swept[0]).exists() and Path(swept[0]) != made  # the race happened
    assert made.is_dir() and (made / search_folder.OWNER).is_file()
    assert search_folder.sweep(str(tmp_path)) == [] and made.is_dir()  # its lock is held: a live owner
    search_folder._made[0][2].close()
    search_folder._remove_own(str(made), os.getpid())
