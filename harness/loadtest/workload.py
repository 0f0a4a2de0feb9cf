"""The load test's requests: envelopes built from the eval split, and the answer each one must get.

Four kinds of completion, each a grader envelope ``{"input", "output", "expected"}`` for a row:

* ``correct``: the row's gold, as a model would write it (in a fenced block);
* ``wrong``: mechanical near-misses of the gold (``harness.common.mutate``: a number, a string, a WHERE
  condition, an aggregate changed), or a query returning something else entirely;
* ``hostile``: the quick cases of the hostile suite (writes, ATTACH, PRAGMA, huge values, ...),
  aimed at the row's first table;
* ``runaway``: a recursive query that never ends on its own, stopped by the bundle's step budget.

The expected answer of every distinct envelope is measured once, alone, before the load
(``calibrate``): under load each answer must be exactly that one (same score, same outcome), so a
crossed, lost or degraded answer cannot pass unnoticed. Hostile and runaway envelopes must also
score 0.

>>> first_table("You answer...\\nReply...\\nsinger(Singer_ID, Name)\\nconcert(id)")
'singer'
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.common.errors import InputError
from harness.common.mutate import mutations
from harness.common.rows import SplitRow, read_split
from harness.emulator.hostile import load_cases

KINDS = ("correct", "wrong", "hostile", "runaway")
# The runaway completion: counts forever; only the bundle's step budget stops it (0.6 s
# on a quiet 2-core machine, 2026-12-01; longer when workers share the cores).
RUNAWAY_SQL = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
# Mix of the ordinary requests (the runaway ones are placed separately, every Nth request).
DEFAULT_MIX = {"correct": 0.4, "wrong": 0.4, "hostile": 0.2}
_SCHEMA_LINE = re.compile(r"^\s*([A-Za-z_][\w$]*)\s*\(")


@dataclasses.dataclass(frozen=True)
class Probe:
    """One distinct envelope of the workload and the answer it must get (set by ``calibrate``)."""

    kind: str
    label: str  # row id and variant, e.g. "eval-00003/number" or "eval-00003/drop-table"
    envelope: dict[str, Any]
    expected: tuple[float, str] | None = None  # (score, outcome) measured alone

    def body(self) -> bytes:
        return json.dumps(self.envelope).encode()


def first_table(prompt: str) -> str:
    """The first ``table(col, ...)`` line of a prompt's schema; InputError when there is none."""
    for line in prompt.splitlines():
        found = _SCHEMA_LINE.match(line)
        if found:
            return found.group(1)
    raise InputError("an eval row's prompt has no schema line `table(col, ...)` to aim the hostile cases at")


def _envelope(row: SplitRow, completion: str) -> dict[str, Any]:
    return {"input": row.prompt, "output": completion, "expected": row.gold}


def hostile_cases(max_chars: int = 100_000) -> list[tuple[str, str]]:
    """(id, completion) of the quick hostile cases (``HostileCase.quick``: refused or capped whatever
    the gold, no step budget needed) that are small enough to send."""
    cases = load_cases("{table}", "/tmp")
    return [(c.id, c.text) for c in cases if c.quick and len(c.text) <= max_chars]


def build_probes(rows: list[SplitRow], max_rows: int | None = None) -> dict[str, list[Probe]]:
    """Every distinct envelope of each kind for the first ``max_rows`` eval rows."""
    if not rows:
        raise InputError("no eval rows to build the load test's envelopes from")
    rows = rows[:max_rows] if max_rows else rows
    probes: dict[str, list[Probe]] = {kind: [] for kind in KINDS}
    cases = hostile_cases()
    for i, row in enumerate(rows):
        probes["correct"].append(Probe("correct", f"{row.id}/gold", _envelope(row, f"```sql\n{row.gold}\n```")))
        variants = [(m.kind, m.sql) for m in mutations(row.gold)] or [("other", "SELECT 'not the answer'")]
        for kind, sql in variants:
            probes["wrong"].append(Probe("wrong", f"{row.id}/{kind}", _envelope(row, sql)))
        table = first_table(row.prompt_text)
        case_id, text = cases[i % len(cases)]  # one hostile case a row, rotating through the suite
        probes["hostile"].append(Probe("hostile", f"{row.id}/{case_id}",
                                       _envelope(row, text.replace("{table}", table))))
    probes["runaway"].append(Probe("runaway", f"{rows[0].id}/runaway", _envelope(rows[0], RUNAWAY_SQL)))
    return probes


def load_probes(eval_path: str | Path, max_rows: int | None = None) -> dict[str, list[Probe]]:
    return build_probes(read_split(eval_path, "eval"), max_rows)


Grade = Callable[[Probe], tuple[int, Any]]


def calibrate(probes: dict[str, list[Probe]], grade: Grade) -> dict[str, list[Probe]]:
    """Each probe with the answer it gets alone; InputError when one gets no score or a wrong one.

    ``grade(probe) -> (http status, parsed body)``. A correct probe must match, a hostile or
    runaway probe must score 0: otherwise the workload (or the bundle) is wrong before any load.
    """
    out: dict[str, list[Probe]] = {}
    for kind, items in probes.items():
        out[kind] = []
        for probe in items:
            status, body = grade(probe)
            if status != 200 or not isinstance(body, dict) or "score" not in body:
                raise InputError(f"calibration: {probe.label} got HTTP {status}: {str(body)[:300]}")
            answer = (float(body["score"]), str(body["outcome"]))
            if kind == "correct" and answer[0] != 1.0:
                raise InputError(f"calibration: the gold of {probe.label} did not match: {body}")
            if kind in ("hostile", "runaway") and answer[0] != 0.0:
                raise InputError(f"calibration: the {kind} probe {probe.label} scored {answer[0]}: {body}")
            out[kind].append(dataclasses.replace(probe, expected=answer))
    return out


def schedule(probes: dict[str, list[Probe]], requests: int, runaway_every: int = 0, seed: int = 7,
             mix: dict[str, float] | None = None) -> list[Probe]:
    """The order of a run: every ``runaway_every``-th request a runaway, the rest drawn by ``mix``.

    Deterministic for a seed. Within a kind, probes are used in turn, so all of them are sent.

    >>> p = {k: [Probe(k, k, {})] for k in KINDS}
    >>> [x.kind for x in schedule(p, 6, runaway_every=3)].count("runaway")
    2
    """
    if requests <= 0:
        raise InputError("the load test needs at least one request")
    mix = mix or DEFAULT_MIX
    kinds = [k for k in mix if probes.get(k)]
    if not kinds:
        raise InputError("no probes to schedule")
    rng = random.Random(seed)
    used = {kind: 0 for kind in KINDS}
    order = []
    for i in range(requests):
        if runaway_every and (i + 1) % runaway_every == 0 and probes.get("runaway"):
            kind = "runaway"
        else:
            kind = rng.choices(kinds, weights=[mix[k] for k in kinds])[0]
        items = probes[kind]
        order.append(items[used[kind] % len(items)])
        used[kind] += 1
    return order
