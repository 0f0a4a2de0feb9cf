"""The `grade` command: score a file of model completions on the eval split with the bundle.

    python3 -m harness grade --bundle dist/spider-scoring.zip --eval out/data/eval.jsonl \\
        --completions out/completions-sft.jsonl --out out/results-sft.jsonl

Inputs (README, "Grading and reports"):

* ``--bundle``: the bundle zip, or a staged bundle folder (``bundle/*.py`` + ``data/``).
* ``--eval``: the eval split, chat JSONL ``{"messages": [system, user, assistant]}``; the final
  assistant message is the gold, the user message the question; row ``i`` (from 0) is
  ``eval-{i:05d}`` unless the line carries ``row_id``/``id``.
* ``--completions``: one completion per eval row (harness/completions.py shapes, including the
  trainer's exported evaluation rows with ``output``).

Output: per-row results (harness/results.py), one line per eval row in eval order. A row the bundle
cannot score (a gold or infrastructure error) is kept with score null, its outcome and the error
message: the grader never turns "our environment broke" into a 0.

A zip is graded by its own code: the emulator (harness/emulate.py) checks its entries, unpacks it
read-only and imports it as the trainer does, then calls its ``grader`` once per row, in this
process. A staged folder is graded in-process by this checkout's ``bundle`` package on the folder's
data, with a warning naming any module of the folder that differs. Inside the locked-down trainer
container, ``harness emulate grader`` writes the same results.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
from pathlib import Path
from typing import Callable

from bundle import bundle_index, scoring_entry
from bundle.scoring_errors import BundleDataError, ScoringInfrastructureError
from harness.common.completions import read_completions, row_id_of
from harness.common.errors import InputError
from harness.common.jsonl import read_jsonl
from harness.common.results import RowResult, write_results

BUNDLE_SOURCE = Path(__file__).resolve().parents[2] / "bundle"


@dataclasses.dataclass(frozen=True)
class EvalRow:
    row_id: str
    question: str
    gold: str
    prompt: str  # system + user text: its schema lines let the bundle tell shared golds apart
    db_id: str | None = None


def _content(message: object) -> str | None:
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        return message["content"]
    return None


def parse_eval_line(data: object, index: int, where: str) -> EvalRow:
    """One eval row from its parsed JSON line; InputError (naming ``where``) when malformed."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected {{\"messages\": [system, user, assistant]}}")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InputError(f"{where}: expected {{\"messages\": [system, user, assistant]}}")
    last = messages[-1]
    gold = _content(last)
    if not isinstance(last, dict) or last.get("role") != "assistant" or not gold or not gold.strip():
        raise InputError(f"{where}: the last message must be the assistant's gold query")
    users = [_content(m) for m in messages[:-1] if isinstance(m, dict) and m.get("role") == "user"]
    if not users or users[-1] is None:
        raise InputError(f"{where}: no user message (the question) before the gold")
    prompt = "\n".join(t for t in (_content(m) for m in messages[:-1]) if t)
    row_id = row_id_of(data)  # the same fields completions name their rows by
    if row_id is None:
        row_id = f"eval-{index:05d}"
    db_id = data.get("db_id") if isinstance(data.get("db_id"), str) else None
    return EvalRow(row_id, users[-1], gold, prompt, db_id)


def read_eval(path: str | os.PathLike) -> list[EvalRow]:
    """The eval split's rows, in file order; InputError names the file and line of a bad row."""
    rows: list[EvalRow] = []
    for number, data in read_jsonl(path, "eval split"):
        rows.append(parse_eval_line(data, len(rows), f"{path}:{number}"))
    duplicated = [i for i, n in collections.Counter(r.row_id for r in rows).items() if n > 1]
    if duplicated:
        raise InputError(f"{path}: row id {duplicated[0]!r} appears more than once")
    if not rows:
        raise InputError(f"{path}: the eval split is empty")
    return rows


Scorer = Callable[[EvalRow, str, str], RowResult]


def score_row(row: EvalRow, completion: str, root: str) -> RowResult:
    """Score one completion with the bundle's data under ``root``; unscored rows keep score None."""
    kwargs = {"output": completion, "expected": row.gold, "input": row.prompt,
              "extra_info": {"row_id": row.row_id, **({"db_id": row.db_id} if row.db_id else {})}}
    db_id = row.db_id or ""
    try:
        call = scoring_entry.read_call(kwargs)
        db_id = bundle_index.load(root).resolve(call.gold, call.db_id, call.row_id, call.prompt).db_id
        verdict = scoring_entry.score_call(call, root=root)
    except ScoringInfrastructureError as exc:
        return RowResult(row.row_id, db_id, row.question, row.gold, completion, None, None,
                         getattr(exc, "outcome", "infrastructure_error"), f"{type(exc).__name__}: {exc}")
    return RowResult(row.row_id, db_id, row.question, row.gold, completion, verdict.sql, verdict.score,
                     verdict.outcome, verdict.detail)


def grade_rows(rows: list[EvalRow], completions: list[str], root: str | os.PathLike,
               scorer: Scorer = score_row) -> list[RowResult]:
    """Score ``completions[i]`` for ``rows[i]`` with the bundle under ``root``; results in row order."""
    if len(rows) != len(completions):
        raise InputError(f"{len(completions)} completions for {len(rows)} eval rows")
    root = str(root)
    try:
        bundle_index.load(root)  # a missing or wrong index fails once here, not once per row
    except BundleDataError as exc:
        raise InputError(f"bundle at {root}: {exc}") from None
    return [scorer(row, completion, root) for row, completion in zip(rows, completions)]


def _checked_root(root: Path, given: str | os.PathLike) -> Path:
    if not (root / bundle_index.INDEX_PATH).is_file():
        raise InputError(f"bundle {given} has no {bundle_index.INDEX_PATH} at its top level; "
                         "pass the zip from `make bundle` or a folder staged by `harness prepare`")
    return root


def grade_zip(zip_path: str | os.PathLike, eval_path: str | os.PathLike, rows: list[EvalRow],
              completions: list[str]) -> list[RowResult]:
    """Grade with the zip's own grader, unpacked and imported as the trainer does (harness.common.bundle_loader).

    The emulator reads the split itself (ids by line number); its rows must be the ones ``rows``
    names, or completions would be paired with the wrong questions.
    """
    from harness.common import bundle_loader as emulate
    from harness.emulator import modes as emulate_modes  # only zips need the emulator

    split_rows = emulate_modes.read_split(eval_path, "eval")
    if [r.id for r in split_rows] != [r.row_id for r in rows]:
        raise InputError(f"{eval_path}: grading a zip needs rows numbered by line (no blank lines, no "
                         "row_id fields), as the trainer numbers them; grade the staged folder instead")
    with emulate.load_bundle(zip_path) as loaded:
        _checked_root(loaded.root, zip_path)
        results = emulate_modes.grade_rows(loaded, split_rows, completions)
        db_of_gold = _single_database_golds(loaded.index())
    # the emulator names the database only for row ids the index holds; the report's breakdown by
    # database needs it, and a gold stored under one database names it without doubt
    return [r if r.db_id else dataclasses.replace(r, db_id=db_of_gold.get(bundle_index.normalize_gold(r.gold), ""))
            for r in results]


def _single_database_golds(index: dict) -> dict[str, str]:
    """Normalized gold -> db_id, for golds the index stores under exactly one database."""
    found: dict[str, set[str]] = {}
    for row in index.get("rows", []):
        found.setdefault(bundle_index.normalize_gold(str(row.get("gold", ""))), set()).add(str(row.get("db_id", "")))
    return {gold: dbs.pop() for gold, dbs in found.items() if len(dbs) == 1}


def differing_modules(root: Path) -> list[str]:
    """Bundle modules in ``root`` whose bytes differ from this checkout's ``bundle/`` (or are missing)."""
    out = []
    for source in sorted(BUNDLE_SOURCE.glob("*.py")):
        other = root / source.name
        if not other.is_file() or other.read_bytes() != source.read_bytes():
            out.append(source.name)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bundle", required=True, help="the bundle zip or a staged bundle folder")
    parser.add_argument("--eval", required=True, dest="eval_path", help="the eval split (chat JSONL)")
    parser.add_argument("--completions", required=True, help="one model completion per eval row (JSONL)")
    parser.add_argument("--out", required=True, help="per-row results file to write (JSONL)")


def _one_per_row(groups: list[list[str]], rows: list[EvalRow], path: str) -> list[str]:
    for row, group in zip(rows, groups):
        if len(group) != 1:
            raise InputError(f"{path}: row {row.row_id} has {len(group)} completions; "
                             "grade takes exactly one per eval row")
    return [g[0] for g in groups]


def run(args: argparse.Namespace) -> int:
    rows = read_eval(args.eval_path)
    groups = read_completions(args.completions).for_rows([r.row_id for r in rows])
    completions = _one_per_row(groups, rows, args.completions)
    bundle = Path(args.bundle)
    if bundle.is_dir():
        differ = differing_modules(_checked_root(bundle, bundle))
        if differ:
            print(f"warning: {', '.join(differ)} in {bundle} differ from this checkout's bundle/; grading "
                  "uses this checkout's code on the folder's data (grade the zip to run its own code)",
                  file=sys.stderr)
        results = grade_rows(rows, completions, bundle)
    elif bundle.is_file():
        results = grade_zip(bundle, args.eval_path, rows, completions)
    else:
        raise InputError(f"bundle {bundle} does not exist; build it with `make bundle` or pass the staged folder")
    write_results(args.out, results)
    outcomes = collections.Counter(r.outcome for r in results)
    scored = [r for r in results if r.scored]
    correct = sum(1 for r in scored if r.score == 1)
    print(f"graded {len(results)} rows into {args.out}: "
          + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())))
    if scored:
        print(f"execution accuracy {correct / len(scored):.3f} ({correct}/{len(scored)} scored rows)")
    unscored = len(results) - len(scored)
    if unscored:
        print(f"warning: {unscored} row(s) unscored (gold or infrastructure errors, see their detail); "
              "fix the bundle or the split and grade again", file=sys.stderr)
    return 0
