"""Episodes that outlive a request: the Open Reward Standard's sessions and NeMo Gym's Gymnasium episodes.

The service's workers are processes, so an episode is a row of a small SQLite file the arbiter
makes before forking, read by every worker: its task (an ORS split and index, or the row a
Gymnasium ``/reset`` was sent), whether it is over, and what its exploration used (the multi-turn
environment, ``bundle/scoring/episode.py``). A submit marks it over in one statement, so two racing
submits give one reward. An exploration query reserves its budget in one statement before it runs
(the calls and the units the episode has left, never more) and gives back what it did not use:
concurrent queries of one episode cannot pass its budgets. Episodes older than a day, and past
``MAX_SESSIONS`` the oldest, are dropped (housekeeping, never a verdict).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from pathlib import Path
from typing import Any

MAX_SESSIONS = 100_000
SESSION_TTL_S = 24 * 3600.0


class OrsError(Exception):
    """A request answered with an HTTP error: status and ``detail`` (as ORS clients read errors)."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail = status, error, detail

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail, "error": self.error, "outcome": "request_error", "message": self.detail,
                "status": self.status}


class Sessions:
    """Open episodes, shared by the service's worker processes through one SQLite file."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.path = str(Path(folder) / "sessions.sqlite")
        self._pid = -1
        self._conn: sqlite3.Connection | None = None
        with self._connect() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS sessions (sid TEXT PRIMARY KEY, split TEXT, idx INTEGER, row TEXT, "
                         "finished INTEGER NOT NULL DEFAULT 0, calls INTEGER NOT NULL DEFAULT 0, "
                         "steps INTEGER NOT NULL DEFAULT 0, reserved INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL)")
        self._close()  # the arbiter forks after this: each worker opens its own connection

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            self._conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._pid = os.getpid()
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def new(self, row: dict[str, Any] | None = None) -> str:
        """A new episode (with its row, for a Gymnasium episode); its id."""
        sid = secrets.token_hex(16)
        conn = self._connect()
        now = time.time()
        conn.execute("DELETE FROM sessions WHERE created < ?", (now - SESSION_TTL_S,))
        conn.execute("DELETE FROM sessions WHERE sid IN (SELECT sid FROM sessions ORDER BY created DESC LIMIT -1 OFFSET ?)",
                     (MAX_SESSIONS - 1,))
        conn.execute("INSERT INTO sessions (sid, row, created) VALUES (?, ?, ?)",
                     (sid, None if row is None else json.dumps(row), now))
        return sid

    def get(self, sid: Any) -> tuple[str | None, int | None, bool]:
        """(split, index, finished) of an open session; OrsError 404 when there is none."""
        found = self._row(sid, "split, idx, finished")
        return found[0], found[1], bool(found[2])

    def row(self, sid: Any) -> tuple[dict[str, Any], bool]:
        """(the row, finished) of a Gymnasium episode; OrsError 404 when there is none."""
        found = self._row(sid, "row, finished")
        if found[0] is None:
            raise OrsError(404, "UnknownEpisode", "this episode has no row: /reset it first")
        return json.loads(found[0]), bool(found[1])

    def progress(self, sid: Any) -> tuple[int, int, bool]:
        """(exploration queries run, units used, finished)."""
        found = self._row(sid, "calls, steps, finished")
        return int(found[0]), int(found[1]), bool(found[2])

    def _row(self, sid: Any, columns: str) -> tuple:
        found = self._connect().execute(f"SELECT {columns} FROM sessions WHERE sid = ?",  # noqa: S608 (fixed names)
                                        (str(sid),)).fetchone() if isinstance(sid, str) and sid else None
        if found is None:
            raise OrsError(404, "UnknownSession", "no open session with this id: /create_session (ORS) or /reset "
                           "(Gymnasium) first (a session is dropped by /delete or after a day)")
        return found

    def bind(self, sid: str, split: str, index: int) -> None:
        self.get(sid)
        self._connect().execute("UPDATE sessions SET split = ?, idx = ?, finished = 0, calls = 0, steps = 0 WHERE sid = ?",
                                (split, index, sid))

    def finish(self, sid: str) -> bool:
        """Mark the episode over; False when it already was (a second submit gets no reward)."""
        return self._connect().execute("UPDATE sessions SET finished = 1 WHERE sid = ? AND finished = 0",
                                       (sid,)).rowcount == 1

    def reserve(self, sid: str, calls: int, call_steps: int, episode_steps: int) -> int | None:
        """One exploration query's budget, taken from the episode's (at most ``calls`` queries and
        ``episode_steps`` units; ``call_steps`` a query); None when none is left or the episode is over."""
        found = self._connect().execute(
            "UPDATE sessions SET calls = calls + 1, reserved = min(?, ? - steps), steps = steps + min(?, ? - steps) "
            "WHERE sid = ? AND finished = 0 AND calls < ? AND steps < ? RETURNING reserved",
            (call_steps, episode_steps, call_steps, episode_steps, sid, calls, episode_steps)).fetchone()
        return None if found is None else int(found[0])

    def give_back(self, sid: str, unused: int) -> None:
        """Return the units a query reserved and did not use."""
        if unused > 0:
            self._connect().execute("UPDATE sessions SET steps = steps - ? WHERE sid = ?", (unused, sid))

    def delete(self, sid: Any) -> None:
        if isinstance(sid, str):
            self._connect().execute("DELETE FROM sessions WHERE sid = ?", (sid,))


def explore(sessions: Sessions, sid: str, episodes: Any, limits: Any, row: dict[str, Any], text: Any,
            root: str) -> str:
    """One exploration query of episode ``sid`` (the bundle's ``scoring.episode`` module as
    ``episodes``): what the model is shown, as ``Episode.explore`` shows it in one process."""
    budget = sessions.reserve(sid, int(limits.explore_calls), int(limits.explore_steps), int(limits.episode_steps))
    if budget is None:
        calls, steps, finished = sessions.progress(sid)
        if finished:
            return "the episode is over: an answer was submitted"
        return str(episodes.refusal(limits, calls, steps))
    used = 0
    try:
        shown, used = episodes.Episode(row, root=root, limits=limits).run(text, budget)
    finally:
        sessions.give_back(sid, budget - used)
    calls, steps, _finished = sessions.progress(sid)
    return f"{shown}\n({episodes.left_note(limits, calls, steps)})"
