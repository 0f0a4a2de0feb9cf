"""Every limit and setting of the scorer, in one table: the ``Limits`` dataclass below.

Each field carries its default, unit and meaning; ``SETTINGS`` and README's limits table are derived
from it, and nothing else in the bundle repeats a default.

What decides a verdict is counted work, never the clock (docs/bundle.md, "Cost model"):

* a predicted query may do ``budget_steps(gold_steps)`` units of work, the larger of
  ``budget_floor_steps`` and ``budget_gold_multiple`` times what its gold did (recorded when the
  bundle is built, with the SQLite version and the cost model). A unit is one SQLite VM step; a
  function whose work grows with its input is charged ``charge_base_steps`` plus its input's size
  over ``charge_bytes_per_step`` (``sql.functions``), preparing a statement is charged per
  character of SQL and fetching per cell, and no value or record may exceed ``max_cell_bytes`` nor
  a program ``max_program_ops``, so that no step hides more than a bounded amount of work. Past the
  budget: ``prediction_over_budget``, score 0.0;
* matching columns may visit ``compare_max_cells`` cells; past it: ``prediction_over_cap``;
* rows, cells, result bytes and text lengths are capped in their own units.

Seconds only guard: the watchdog (``sql.watchdog``) stops a query whose thread has used
``cpu_guard(budget)`` CPU seconds, or whose wall time passed ``wall_guard_s`` (``gold_wall_guard_s``
for a gold query), each at least ten times what the costliest query within its budget takes on a
2-core development machine at a quarter of a CPU. Its firing means the build or the machine is far
out of its depth, not that the model was wrong: the verdict is ``infrastructure_timeout``, unscored. Calibration on the real
Spider golds (December 2026): the median gold takes under 1,000 steps, 99% under 150,000, the
slowest (bike_1) 15.6 million.

>>> DEFAULT_LIMITS.budget_steps(0), DEFAULT_LIMITS.budget_steps(15_604_000)
(20000000, 31208000)
>>> DEFAULT_LIMITS.replace(max_rows=50).max_rows
50
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any


def _setting(default: float | str, unit: str, meaning: str, choices: tuple[str, ...] = ()) -> Any:
    return dataclasses.field(default=default, metadata={"unit": unit, "meaning": meaning, "choices": choices})


SEMANTICS = ("original", "neighbours")
SEARCH = ("grader", "always", "off")
DIFFERENCE = ("always", "grader", "off")


@dataclasses.dataclass(frozen=True)
class Limits:
    """The scorer's limits; build variants with ``replace`` (instances are immutable)."""

    budget_floor_steps: int = _setting(
        20_000_000, "VM steps", "least work a predicted query may do before it is over budget")
    budget_gold_multiple: int = _setting(
        2, "x gold", "a predicted query may also do this many times the work of its gold")
    neighbour_budget_steps: int = _setting(
        10_000_000, "VM steps", "work a prediction's runs on the neighbour databases may do together, "
        "beyond its budget on the original (each run also within its own gold's budget there)")
    gold_max_steps: int = _setting(
        500_000_000, "VM steps", "work a gold query may do (at build time, or once per process)")
    wall_guard_s: float = _setting(
        600.0, "s", "wall-clock guard per predicted query and comparison; firing is unscored")
    cpu_guard_s: float = _setting(
        60.0, "s", "CPU time of its thread a predicted query may take (preparing, running, fetching, finishing) per "
        "budget_floor_steps of its budget before the watchdog stops it; firing is unscored")
    gold_wall_guard_s: float = _setting(
        120.0, "s", "wall-clock guard per gold query; firing is unscored")
    max_rows: int = _setting(100_000, "rows", "rows fetched before the result counts as over the cap")
    max_cell_bytes: int = _setting(
        512, "bytes", "largest string, blob or record a query may read or build (SQLITE_LIMIT_LENGTH), "
        "and longest LIKE/GLOB pattern: what one VM step can work on")
    charge_base_steps: int = _setting(
        100, "VM steps", "charged per call of a function whose work grows with its input (sql_functions.CHARGED)")
    charge_bytes_per_step: int = _setting(
        16, "bytes", "a charged function's input bytes (searches: bytes x pattern bytes) per VM step charged")
    max_result_bytes: int = _setting(64_000_000, "bytes", "estimated size of a whole fetched result")
    max_sql_chars: int = _setting(20_000, "chars", "longest query text executed")
    max_expansion_tokens: int = _setting(
        20_000, "tokens", "tokens of common table expressions preparing a statement may copy (each reference copies "
        "the expression's body, a copy's references in turn; counted from the text before it is prepared)")
    max_join_weight: int = _setting(
        1_000, "tables cubed", "what the query planner may weigh: over every FROM clause, the cube of the tables it "
        "joins once flattened (a subquery in FROM and a common table expression count their tables), each as often "
        "as preparing copies it; counted from the text before it is prepared (real golds: at most 250, two 5-table joins)")
    max_program_ops: int = _setting(
        8_192, "VM operations", "largest program a statement may prepare (SQLITE_LIMIT_VDBE_OP): one of at most half "
        "this always prepares, one over it never (SQLite grows the program by doubling)")
    max_completion_chars: int = _setting(200_000, "chars", "longest model output read by the extractor")
    max_prompt_chars: int = _setting(
        200_000, "chars", "longest prompt text read to tell databases apart")
    compare_max_cells: int = _setting(
        4_000_000, "cells", "cells visited while matching the columns of two results")
    heap_limit_bytes: int = _setting(
        268_435_456, "bytes", "process-wide SQLite heap ceiling (PRAGMA hard_heap_limit)")
    cache_pages_kib: int = _setting(2_048, "KiB", "page cache per connection (PRAGMA cache_size)")
    progress_steps: int = _setting(1_000, "VM steps", "how often SQLite reports work done (the budget's unit)")
    float_digits: int = _setting(12, "digits", "significant digits numbers are rounded to before comparison")
    semantics: str = _setting(
        "neighbours", "choice", "same rows on the original database only, or on it and its neighbour databases "
        "(a bundle without neighbours scores on the original either way)", SEMANTICS)
    search: str = _setting(
        "grader", "choice", "counterexample search after a match on the original and its neighbours: for the "
        "grader's calls only, for the reward's too, or never (docs/neighbours.md)", SEARCH)
    search_databases: int = _setting(
        24, "databases", "databases the counterexample search may judge one prediction on (its gold's, built once "
        "per process, and those of what the prediction adds to the gold)")
    search_steps: int = _setting(
        20_000_000, "VM steps", "work the search's gold and prediction runs may do in all, for one prediction")
    difference: str = _setting(
        "always", "choice", "the search aimed at the difference (edits of the original where an answer differs from "
        "its gold) after a match on the original and its neighbours: for the reward's and the grader's calls, for "
        "the grader's only, or never (docs/neighbours.md)", DIFFERENCE)
    difference_edits: int = _setting(
        32, "edits", "edits of the original the search aimed at the difference may judge one answer on")
    difference_steps: int = _setting(
        5_000_000, "VM steps", "work that search may do in all for one answer: the gold's runs, the proofs of the "
        "edits and the answer's runs")
    difference_max_bytes: int = _setting(
        16_777_216, "bytes", "largest original the search aimed at the difference copies into memory (a larger one "
        "is not edited)")
    explore_calls: int = _setting(
        8, "queries", "queries the multi-turn environment's exploration tool runs in one episode (scoring.episode)")
    explore_steps: int = _setting(
        5_000_000, "VM steps", "work one exploration query may do")
    episode_steps: int = _setting(
        20_000_000, "VM steps", "work an episode's exploration queries may do together (the final answer is scored "
        "within its own budgets, as a one-shot completion)")
    explore_rows: int = _setting(10, "rows", "rows of an exploration query's result shown (all are counted)")
    explore_chars: int = _setting(2_000, "chars", "longest text an exploration query's result is shown as")

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            choices = field.metadata["choices"]
            if choices:
                if value not in choices:
                    raise ValueError(f"limit {field.name} must be one of {', '.join(choices)}, got {value!r}")
                continue
            wanted = _type(field)
            if not _valid(value, wanted):
                raise ValueError(f"limit {field.name} must be a positive {wanted.__name__}, got {value!r}")
        if self.progress_steps > _C_INT_MAX:  # SQLite takes it as a C int
            raise ValueError(f"limit progress_steps must be at most {_C_INT_MAX}, got {self.progress_steps}")

    def replace(self, **changes: float | str) -> Limits:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def budget_steps(self, gold_steps: int) -> int:
        """VM steps a predicted query may take when its gold took ``gold_steps``."""
        return max(self.budget_floor_steps, self.budget_gold_multiple * int(gold_steps))

    def cpu_guard(self, budget_steps: int) -> float:
        """CPU seconds the watchdog lets a query with ``budget_steps`` take: ``cpu_guard_s`` per floor budget.

        >>> DEFAULT_LIMITS.cpu_guard(20_000_000), DEFAULT_LIMITS.cpu_guard(31_208_000)
        (60.0, 93.624)
        """
        return float(self.cpu_guard_s) * max(1.0, int(budget_steps) / self.budget_floor_steps)


_C_INT_MAX = 2**31 - 1


def _valid(value: object, wanted: type) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if wanted is int and not isinstance(value, int):
        return False
    return math.isfinite(value) and value > 0


@dataclasses.dataclass(frozen=True)
class Setting:
    """One row of the limits table."""

    name: str
    default: float | str
    unit: str
    meaning: str
    type: type
    choices: tuple[str, ...] = ()


def _type(field: dataclasses.Field) -> type:
    known: dict = {"int": int, "float": float, "str": str}
    return known.get(field.type, field.type)  # type: ignore[arg-type]


def _settings() -> tuple[Setting, ...]:
    return tuple(Setting(f.name, f.default, f.metadata["unit"], f.metadata["meaning"],  # type: ignore[arg-type]
                         _type(f), f.metadata["choices"])
                 for f in dataclasses.fields(Limits))


SETTINGS = _settings()
ENV_PREFIX = "SPIDER_SCORING_"


def env_name(name: str) -> str:
    """The environment variable that overrides a setting.

    >>> env_name("wall_guard_s")
    'SPIDER_SCORING_WALL_GUARD_S'
    """
    return ENV_PREFIX + name.upper()


def _parse(setting: Setting, raw: str) -> float | str:
    text = raw.strip()
    if setting.choices:
        if text not in setting.choices:
            raise ValueError(f"{env_name(setting.name)}={raw!r} is not one of {', '.join(setting.choices)}; "
                             f"unset it or give one of them (default {setting.default})")
        return text
    try:
        value: float = int(text) if setting.type is int else float(text)
    except ValueError:
        kind = "a whole number (e.g. 20000000)" if setting.type is int else "a number"
        raise ValueError(f"{env_name(setting.name)}={raw!r} is not {kind} of {setting.unit}; "
                         f"unset it or give a valid value (default {setting.default})") from None
    if not _valid(value, setting.type):
        raise ValueError(f"{env_name(setting.name)}={raw!r} must be positive and finite; "
                         f"unset it or give a valid value (default {setting.default})")
    return value


def limits_from_env(environ: Mapping[str, str] | None = None) -> Limits:
    """Limits with overrides from ``SPIDER_SCORING_<NAME>`` variables (e.g. SPIDER_SCORING_MAX_ROWS).

    A value that is not valid for its setting's type is an error naming the variable, never rounded.

    >>> limits_from_env({"SPIDER_SCORING_MAX_ROWS": "50"}).max_rows
    50
    >>> limits_from_env({"SPIDER_SCORING_MAX_ROWS": "50.7"})
    Traceback (most recent call last):
    ...
    ValueError: SPIDER_SCORING_MAX_ROWS='50.7' is not a whole number (e.g. 20000000) of rows; unset it or give a valid value (default 100000)
    """
    environ = os.environ if environ is None else environ
    changes = {s.name: _parse(s, environ[env_name(s.name)]) for s in SETTINGS if env_name(s.name) in environ}
    return Limits(**changes)  # type: ignore[arg-type]


DEFAULT_LIMITS = Limits()
