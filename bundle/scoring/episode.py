"""One multi-turn episode of one row: the model explores the row's database, then answers.

``Episode(row)`` reads the row as the reward reads a trainer's row (its gold and hints: ``db_id``,
a row id, the prompt), and resolves its original database. Then:

* ``explore(sql)``: one read-only query on the original database, guarded as a prediction is
  (``sql.guard``: counted work, caps on rows and memory, nothing written, nothing attached), within
  ``explore_steps`` units and what is left of the episode's ``episode_steps``, at most
  ``explore_calls`` times. It answers with text for the model: the columns, the first
  ``explore_rows`` rows, how many there were, or the error as SQLite gave it. Neighbour and search
  databases are never shown: they judge the answer, and an answer tuned on them would be paid for
  what it saw.
* ``submit(sql)``: the final answer, scored once by the bundle's verdict exactly as the reward (or,
  with ``caller="grader"``, the grader) scores the same text as a one-shot completion: same
  neighbours, same searches, same reward shape. What the exploration saw plays no part.

Every observation is a function of the row, the query text, the bundle and what the episode has
used so far (queries run fresh, so their counted work is exact): the same episode gives the same
observations and the same reward on any machine. A guard that fires (the machine far too slow)
or a damaged database raises the bundle's typed error, as the one-shot reward does: the episode
is unscored, never a wrong answer.

>>> import sqlite3, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "t.sqlite")
>>> with sqlite3.connect(path) as c: _ = c.executescript("CREATE TABLE t(a, b); INSERT INTO t VALUES (1, 'x'), (2, NULL);")
>>> print(render(("a", "b"), [(1, "x"), (2, None)], DEFAULT_LIMITS))
2 rows
a | b
1 | x
2 | NULL
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import NamedTuple

from ..contract.errors import DatabaseUnavailableError, ScoringTimeoutError
from ..contract.limits import DEFAULT_LIMITS, Limits
from ..sql import extract as sql_extract
from ..sql import guard as sql_guard
from ..sql import verdict as verify_mod
from . import entry as scoring_entry
from . import index as bundle_index

CALLERS = ("reward", "grader")
# What a multi-turn prompt tells the model (``prepare --multi-turn``): with tool calls (TRL, the Open
# Reward Standard, NeMo Gym's tools), or with tags in its text (OpenRLHF's agent, SkyRL, NeMo Gym's Gymnasium).
TOOL_INSTRUCTIONS = (
    "You may look at the data before answering: call the tool `query` with one read-only SQLite query to see its "
    "first rows (a few calls at most), then call `submit` with your final query. Only the submitted query is scored.")
TAG_INSTRUCTIONS = (
    "You may look at the data before answering: write <query>one read-only SQLite query</query> to see its first "
    "rows (a few times at most), then write <answer>your final SQLite query</answer>. Only the answer is scored.")
QUERY, ANSWER = "query", "answer"
_TAG = re.compile(r"<(query|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
CELL_CHARS = 80  # longest cell shown; a longer one ends with "..." and its length


class Answer(NamedTuple):
    """The scored final answer: the text submitted, its verdict, what the reward pays (the bundle's
    shape; the grader's verdict score for ``caller="grader"``) and the shape's name."""

    text: str
    verdict: verify_mod.Verdict
    value: float | None
    shape: str | None


class Episode:
    """One row's episode (see the module docstring): one a rollout; its calls are taken one at a time."""

    def __init__(self, row: Mapping, *, root: str | None = None, caller: str = "reward",
                 limits: Limits | None = None) -> None:
        if caller not in CALLERS:
            raise ValueError(f"caller must be one of {', '.join(CALLERS)}, got {caller!r}")
        self.limits = limits or scoring_entry.current_limits()
        self.root, self.caller = root, caller
        self.call = scoring_entry.read_episode_row(row, self.limits)
        data = bundle_index.load(root)
        call = self.call
        self.resolved = (data.resolve_by_hints(call.gold, call.db_id, call.row_id)
                         or data.resolve_by_gold(call.gold, call.db_id, call.row_id, call.prompt))
        self.calls = 0
        self.steps = 0
        self.answer: Answer | None = None
        self._lock = threading.Lock()

    @property
    def db_id(self) -> str:
        return self.resolved.db_id

    @property
    def done(self) -> bool:
        return self.answer is not None

    def explore(self, text: object) -> str:
        """Run one read-only query on the row's original database; what the model is shown."""
        limits = self.limits
        with self._lock:
            if self.answer is not None:
                return "the episode is over: an answer was submitted"
            refused = refusal(limits, self.calls, self.steps)
            if refused is not None:
                return refused
            self.calls += 1
            shown, steps = self.run(text, min(int(limits.explore_steps), limits.episode_steps - self.steps))
            self.steps += steps
            return f"{shown}\n({left_note(limits, self.calls, self.steps)})"

    def run(self, text: object, budget: int) -> tuple[str, int]:
        """One exploration query within ``budget`` units, counted by nobody: (what is shown, the units
        it used). For a caller that keeps an episode's counters itself (the service's sessions)."""
        limits = self.limits
        if not isinstance(text, str):
            return "error: pass the query as a string", 0
        found = sql_extract.extract(text, limits.max_completion_chars)
        if found.too_long:
            return f"over cap: the text is longer than {limits.max_completion_chars:,} characters: it is not read", 0
        if not found.sql:
            return "error: no SQL query found", 0
        path = self.resolved.path
        try:
            if found.second is not None and sql_guard.is_statement(path, found.second, limits):
                return "forbidden: one statement at a time", 0
            raw = sql_guard.run_query(path, found.sql, limits, budget_steps=budget, wall_s=limits.wall_guard_s,
                                      cpu_s=limits.cpu_guard(budget), fresh=True)
        except sql_guard.QueryFailed as failed:
            self._fault(failed)
            return f"{_KIND_SHOWN[failed.kind]}: {failed.detail}", min(int(failed.steps or 0), budget)
        return render(raw.columns, raw.rows, limits), raw.steps

    def _fault(self, failed: sql_guard.QueryFailed) -> None:
        """A failure that is not the model's doing ends the episode unscored (a typed error)."""
        if failed.kind == sql_guard.WALL_GUARD:
            raise ScoringTimeoutError(f"an exploration query on database {self.db_id!r} stopped: {failed.detail}. "
                                      "The episode is unscored, not wrong: give the scorer more CPU")
        if failed.kind == sql_guard.INFRASTRUCTURE:
            raise DatabaseUnavailableError(f"database {self.db_id!r} failed while exploring ({failed.detail}); "
                                           "the bundle's data is damaged: rebuild and push it")

    def submit(self, text: object) -> Answer:
        """Score the final answer (once: a second submission gets the first's answer)."""
        with self._lock:
            if self.answer is None:
                completion = text if isinstance(text, str) else ""
                call = self.call._replace(completion=completion)
                if self.caller == "grader":
                    verdict = scoring_entry.score_call(call, self.limits, self.root, caller="grader")
                    self.answer = Answer(completion, verdict, verdict.score, None)
                else:
                    found = scoring_entry.reward_call(call, self.root)
                    self.answer = Answer(completion, found.verdict, found.value, found.shape)
            return self.answer

    def turn(self, action: object, last: bool = False) -> tuple[str | None, Answer | None]:
        """One turn written with tags (``read_action``): ``(shown, None)`` when it explores, else
        ``(None, answer)``. A query on the ``last`` turn or past the episode's budget is an empty answer."""
        kind, text = read_action(action)
        if kind == QUERY:
            if not last and refusal(self.limits, self.calls, self.steps) is None:
                return self.explore(text), None
            text = ""
        return None, self.submit(text)

    def unanswered(self) -> Answer:
        """The answer of an episode that ended with no submission: scored as an empty completion
        (``no_query``, the shape's value for it)."""
        return self.submit("")


def refusal(limits: Limits, calls: int, steps: int) -> str | None:
    """Why no more exploration query runs after ``calls`` queries and ``steps`` units (None: one may)."""
    if calls >= limits.explore_calls:
        return f"no query run: this episode's {limits.explore_calls} queries are used; submit your answer"
    if steps >= limits.episode_steps:
        return f"no query run: this episode's {limits.episode_steps:,} units of work are used; submit your answer"
    return None


def left_note(limits: Limits, calls: int, steps: int) -> str:
    """What an observation ends with: the queries and the work the episode has left."""
    return (f"queries left: {limits.explore_calls - calls} of {limits.explore_calls}; "
            f"work left: {max(limits.episode_steps - steps, 0):,} of {limits.episode_steps:,} units")


_KIND_SHOWN = {
    sql_guard.ERROR: "error",
    sql_guard.FORBIDDEN: "forbidden",
    sql_guard.OVER_BUDGET: "over budget",
    sql_guard.OVER_CAP: "over cap",
    sql_guard.WALL_GUARD: "stopped",
    sql_guard.INFRASTRUCTURE: "database failure",
}


def render(columns: tuple[str, ...], rows: list[tuple], limits: Limits = DEFAULT_LIMITS) -> str:
    """A result as the model reads it: how many rows, the columns, the first ``explore_rows`` rows
    (cells past ``CELL_CHARS`` cut), at most ``explore_chars`` characters in all."""
    count = len(rows)
    head = f"{count:,} row{'' if count == 1 else 's'}"
    shown = rows[:int(limits.explore_rows)]
    if count > len(shown):
        head += f" (the first {len(shown)} shown)"
    lines = [head, " | ".join(_cell(c) for c in columns)]
    lines += [" | ".join(_cell(v) for v in row) for row in shown]
    text = "\n".join(lines)
    cap = int(limits.explore_chars)
    if len(text) > cap:
        cut = text[:cap].rsplit("\n", 1)[0] if "\n" in text[:cap] else text[:cap]
        text = f"{cut}\n... (cut at {cap:,} characters)"
    return text


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<blob of {len(value):,} bytes>"
    text = " ".join(str(value).split()) if isinstance(value, str) else repr(value)
    if len(text) > CELL_CHARS:
        return f"{text[:CELL_CHARS]}... ({len(text):,} chars)"
    return text


def read_action(text: object) -> tuple[str, str]:
    """What a turn written with tags asks for: ``("query", sql)`` when its last tag is a query,
    else ``("answer", text)``, the text an ``<answer>`` tag holds, or the whole turn (read as a
    one-shot completion is: a fenced or bare query).

    >>> read_action("let me look <query>SELECT count(*) FROM t</query>")
    ('query', 'SELECT count(*) FROM t')
    >>> read_action("<query>SELECT 1</query> so: <answer>SELECT 2</answer>")
    ('answer', 'SELECT 2')
    >>> read_action("SELECT 3")
    ('answer', 'SELECT 3')
    """
    text = text if isinstance(text, str) else ""
    found = _TAG.findall(text)
    if not found:
        return ANSWER, text
    kind, body = found[-1]
    return (QUERY, body.strip()) if kind.lower() == QUERY else (ANSWER, body.strip())
