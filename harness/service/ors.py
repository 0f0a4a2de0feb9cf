"""The Open Reward Standard (ORS): the rl and eval splits as an environment whose tools are ``query`` and ``submit``.

An ORS client (PyPI ``openreward``; TRL's ``trl.experimental.openreward.OpenRewardSpec``) lists the
tasks of a split, opens a session on one (``/create_session``, then ``/create`` with the split and
index), reads its prompt (``/prompt``) and calls tools (``/call``) until one ends the episode with a
reward. Here the environment is ``spider``:

* splits ``train`` (the rl split's rows; ``rl`` is the same) and ``eval``; a task is
  ``{"row_id", "split", "db_id"}``: never the gold;
* the prompt is the row's own messages (system and user) as one text block;
* with a bundle that has the multi-turn episode (``bundle/scoring/episode.py``, docs/multi-turn.md),
  a tool ``query(sql)`` that runs one read-only query on the row's database and shows its first rows
  (``finished`` false, no reward; the budgets of an episode kept in its session);
* ``submit(sql)``: the answer is graded as ``/grade`` grades it and the episode ends
  with the bundle's reward shape's value for the grader's outcome; its text block says the outcome
  and why, ``metadata`` holds ``outcome``, ``match`` (1.0 or 0.0), ``explanation`` and ``sql``. A
  row the bundle cannot score ends the episode with ``reward`` null and the reason in ``metadata``
  (``unscored``, ``message``): never a score.

Sessions outlive a request and the service's workers are processes, so a session is a row of a
small SQLite file the arbiter makes before forking (``harness.service.sessions``), read by every worker; a submit
marks it finished in one statement, so two racing submits give one reward. Sessions older than a
day, and past ``MAX_SESSIONS`` the oldest, are dropped.

Streamed answers (``/create_session``, ``/call``) are server-sent events: ``task_id``, then ``end``
with the JSON (``sse``). Errors are JSON with ``detail``, as ORS clients read them; a tool call that
cannot run (unknown tool, no ``sql``, the episode over) is the call's own ``ok: false``.

>>> sse([("task_id", "abc"), ("end", "")]).decode()
'event: task_id\\ndata: abc\\n\\nevent: end\\ndata: \\n\\n'
>>> tool_result("match", None, {})["output"]["reward"] is None
True
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from harness.common.errors import InputError
from harness.common.rows import SplitRow, read_split
from harness.service import openrlhf
from harness.service.sessions import OrsError, Sessions

ENV_NAME = "spider"
SPLITS = {"train": "rl", "rl": "rl", "eval": "eval"}  # ORS split name -> the prepared split
LISTED_SPLITS = [{"name": "train", "type": "train"}, {"name": "eval", "type": "test"}]
SESSION_HEADER = "HTTP_X_SESSION_ID"
SUBMIT = {
    "name": "submit",
    "description": "Submit your final SQLite query for the question. It is run on the database and compared "
                   "with the expected rows; the episode then ends with its reward.",
    "input_schema": {"type": "object",
                     "properties": {"sql": {"type": "string", "description": "one SQLite SELECT statement"}},
                     "required": ["sql"]},
}
QUERY = {
    "name": "query",
    "description": "Run one read-only SQLite query on the question's database and see how many rows it gives, its "
                   "columns and its first rows (a few calls an episode). It does not end the episode.",
    "input_schema": SUBMIT["input_schema"],
}
STREAM_TYPE = "text/event-stream"
# The paths of the environment, with or without the environment's name in front (/spider/tools).
PATHS = ("/create_session", "/create", "/delete", "/delete_session", "/ping", "/list_environments", "/splits",
         "/tools", "/task_tools", "/num_tasks", "/task", "/tasks", "/prompt", "/call")


@dataclasses.dataclass(frozen=True)
class Stream:
    """A server-sent event stream to answer with (its bytes, ``STREAM_TYPE``)."""

    body: bytes


def sse(events: list[tuple[str, str]]) -> bytes:
    """Events as the ORS client parses them: ``event:`` then one ``data:`` line per line, a blank line."""
    out = []
    for name, data in events:
        out.append(f"event: {name}\n" + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n")
    return "".join(out).encode("utf-8")


def route(path: str) -> str | None:
    """The environment's own path for a request path (``/spider/call`` -> ``/call``); None: not ORS."""
    prefix = "/" + ENV_NAME
    if path.startswith(prefix + "/"):
        path = path[len(prefix):]
    return path if path in PATHS else None


class Tasks:
    """The rows of the prepared splits an environment serves (``DATA/data/{rl,eval}.jsonl``)."""

    def __init__(self, folder: str | os.PathLike, db_ids: dict[str, str] | None = None) -> None:
        self.folder = Path(folder)
        self.db_ids = db_ids or {}
        self.rows: dict[str, list[SplitRow]] = {}
        for split in sorted(set(SPLITS.values())):
            path = self.folder / f"{split}.jsonl"
            if path.is_file():
                self.rows[split] = read_split(path, split)
        if not self.rows:
            raise InputError(f"no rl.jsonl nor eval.jsonl in {self.folder}: point --tasks at a prepared folder's "
                             "data/ (python3 -m harness prepare writes them)")

    def split(self, name: Any) -> list[SplitRow]:
        rows = self.rows.get(SPLITS.get(name, "")) if isinstance(name, str) else None
        if rows is None:
            raise OrsError(400, "InvalidSplit", f"Invalid split {str(name)[:40]!r}: one of "
                           f"{', '.join(n for n in SPLITS if SPLITS[n] in self.rows)}")
        return rows

    def row(self, split: Any, index: Any) -> SplitRow:
        rows = self.split(split)
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(rows):
            raise OrsError(400, "InvalidIndex", f"Invalid index {str(index)[:20]}: the split has {len(rows)} tasks")
        return rows[index]

    def task(self, row: SplitRow) -> dict[str, Any]:
        """What a client may see of a row: never its gold."""
        out = {"row_id": row.id, "split": row.split}
        if row.id in self.db_ids:
            out["db_id"] = self.db_ids[row.id]
        return out

    @staticmethod
    def prompt(row: SplitRow) -> list[dict[str, Any]]:
        return [{"type": "text", "text": "\n\n".join(str(m.get("content", "")) for m in row.prompt)}]


def tool_result(text: str, reward: float | None, metadata: dict[str, Any], finished: bool = True) -> dict[str, Any]:
    """The end event's JSON of a tool call that ran (``finished``: the episode is over)."""
    return {"ok": True, "output": {"blocks": [{"type": "text", "text": text, "detail": None}], "metadata": metadata,
                                   "reward": reward, "finished": finished}}


def tool_refused(reason: str, message: str) -> dict[str, Any]:
    """The end event's JSON of a tool call that could not run (ORS's reasons)."""
    return {"ok": False, "error": message, "reason": reason}


def graded(result: dict[str, Any], reward: float | None) -> dict[str, Any]:
    """The tool result for the grader's answer (or its error body: then unscored, no reward)."""
    score = result.get("score")
    if isinstance(score, (int, float)) and not isinstance(score, bool) and reward is not None:
        meta = {"outcome": result.get("outcome"), "match": float(score), "explanation": result.get("explanation", ""),
                "sql": result.get("sql")}
        why = f": {meta['explanation']}" if meta["explanation"] else ""
        return tool_result(f"Graded: {meta['outcome']}{why}", reward, meta)
    meta = {"outcome": result.get("outcome"), "unscored": openrlhf.reason(result),
            "message": str(result.get("message") or result.get("explanation") or "")}
    return tool_result(f"Not graded ({meta['unscored']}): {meta['message']}", None, meta)


def stream_of(sid: str, payload: dict[str, Any]) -> Stream:
    return Stream(sse([("task_id", sid), ("end", json.dumps(payload))]))



class Environment:
    """The ``spider`` environment's answers, route by route (the application reads the request)."""

    def __init__(self, tasks: Tasks, sessions: Sessions, multi_turn: bool = False) -> None:
        self.tasks, self.sessions = tasks, sessions
        self.tools = [QUERY, SUBMIT] if multi_turn else [SUBMIT]  # query: the bundle's multi-turn episode

    def answer(self, path: str, body: Any, sid: Any, grade: Any, explore: Any = None) -> Any:
        """The payload for one request: a JSON value or a ``Stream``; OrsError for an HTTP error.

        ``grade(envelope) -> (grader answer or error body, reward or None)``; ``explore(row, sid, sql)
        -> (what the model is shown, or None and the grader's error body when the row cannot be
        explored)``, for the ``query`` tool.
        """
        body = body if isinstance(body, dict) else {}
        if path == "/create_session":
            sid = self.sessions.new()
            return Stream(sse([("task_id", sid), ("end", json.dumps({"sid": sid}))]))
        if path in ("/delete", "/delete_session"):
            self.sessions.delete(sid)
            return {}
        if path == "/ping":
            self.sessions.get(sid)
            return {"status": "ok"}
        if path == "/list_environments":
            return [ENV_NAME]
        if path == "/splits":
            return [s for s in LISTED_SPLITS if SPLITS[s["name"]] in self.tasks.rows]
        if path in ("/tools", "/task_tools"):
            return {"tools": self.tools}
        if path == "/num_tasks":
            return {"num_tasks": len(self.tasks.split(body.get("split")))}
        if path == "/task":
            return {"task": self.tasks.task(self.tasks.row(body.get("split"), body.get("index"))), "env_name": ENV_NAME}
        if path == "/tasks":
            return {"tasks": [self.tasks.task(r) for r in self.tasks.split(body.get("split"))], "env_name": ENV_NAME}
        if path == "/create":
            split, index = self._task_of(body)
            self.sessions.bind(sid, split, index)
            return {"sid": sid}
        if path == "/prompt":
            return self.tasks.prompt(self._row(sid))
        if path == "/call":
            return self._call(body, sid, grade, explore)
        raise OrsError(404, "NotFound", f"no ORS route {path[:60]!r}")

    def _task_of(self, body: dict[str, Any]) -> tuple[str, int]:
        spec = body.get("task_spec")
        if isinstance(spec, dict) and isinstance(spec.get("row_id"), str):
            named = spec.get("split", "train")
            for position, row in enumerate(self.tasks.split(named)):
                if row.id == spec["row_id"]:
                    return str(named), position
            raise OrsError(400, "InvalidTask", f"no task {spec['row_id'][:40]!r} in split {str(named)[:20]!r}")
        split = body.get("split", "train")
        row = self.tasks.row(split, body.get("index"))  # checked now: a bad split or index is the create's error
        return str(split), self.tasks.split(split).index(row)

    def _row(self, sid: Any) -> SplitRow:
        split, index, _finished = self.sessions.get(sid)
        if split is None:
            raise OrsError(400, "NoTask", "the session has no task yet: /create it with a split and an index")
        return self.tasks.row(split, index)

    def _call(self, body: dict[str, Any], sid: Any, grade: Any, explore: Any) -> Stream:
        row = self._row(sid)
        name, args = body.get("name"), body.get("input")
        names = [str(t["name"]) for t in self.tools]
        if name not in names:
            return stream_of(sid, tool_refused("not_found", f"no tool {str(name)[:40]!r}: the tools are {', '.join(names)}"))
        if not isinstance(args, dict) or not isinstance(args.get("sql"), str):
            return stream_of(sid, tool_refused("input_validation", f"{name} takes {{\"sql\": \"<one SQLite query>\"}}"))
        envelope = {"input": list(row.prompt), "output": args["sql"], "expected": row.gold, "row_id": row.id}
        if row.id in self.tasks.db_ids:
            envelope["db_id"] = self.tasks.db_ids[row.id]
        if name == QUERY["name"]:
            if self.sessions.get(sid)[2]:
                return stream_of(sid, tool_refused("episode_finished", "the episode is over: an answer was submitted"))
            shown, error = explore({k: v for k, v in envelope.items() if k != "output"}, sid, args["sql"])
            if shown is None and self.sessions.finish(sid):  # the row cannot be explored: unscored, over
                return stream_of(sid, graded(error, None))
            calls, steps, _finished = self.sessions.progress(sid)
            return stream_of(sid, tool_result(shown or "", None, {"queries": calls, "units": steps}, finished=False))
        if not self.sessions.finish(sid):
            return stream_of(sid, tool_refused("episode_finished", "the episode is over: one submit a session"))
        result, reward = grade(envelope)
        return stream_of(sid, graded(result, reward))
