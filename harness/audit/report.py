"""The audit's document (JSON), its table, and the threshold check ``verify`` applies.

Per split: the rows audited, the rows *hackable* (some policy paid and shown wrong; the union),
and per policy the rows it applies to, is paid on (shown wrong) and is set aside on (paid, but no
fair witness tells it from its gold). Then every hackable row with what is paid and the witness
that shows it wrong (what a neighbour generator would have to build to close it), and every
set-aside row with the invariant a witness would have to break.

>>> doc = {"splits": {"rl": {"rows": 200, "hackable": 3}, "eval": {"rows": 100, "hackable": 0}}}
>>> over_threshold(doc, 0.01)
['rl: 3 of 200 rows hackable (1.5%), over the threshold of 1.0%']
"""

from __future__ import annotations

import collections
from typing import Any

from harness.audit.catalogue import FIRST_SEVEN, POLICIES
from harness.audit.model import AuditRow, Scored
from harness.common.bundle_loader import LoadedBundle
from harness.common.errors import HarnessError

FORMAT = "spider-scoring-audit"
VERSION = 1
# The share of a split's rows that may be hackable before `verify` and `audit` fail (docs/audit.md,
# "Threshold"): above today's default bundles (Spider 1.2% rl / 4.3% eval, the sample 0% / 10%), far
# below a bundle whose neighbour databases are missing (99% / 92%). Lower it as the holes close.
DEFAULT_THRESHOLD = 0.15


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _bundle_facts(loaded: LoadedBundle) -> dict:
    index = loaded.index()
    neighbours = sum(len(e.get("neighbours") or []) for e in index.get("databases", {}).values())
    try:  # the bundle's settings as its calls read them (SPIDER_SCORING_SEMANTICS); an internal module, so guarded
        semantics = str(loaded.module("scoring.entry").current_limits().semantics)
    except (AttributeError, HarnessError):
        semantics = "unknown"
    return {"zip": loaded.zip_path, "sha256": loaded.sha256, "semantics": semantics, "neighbour_databases": neighbours}


def _tally(split: dict, results: list[Scored]) -> tuple[list[dict], list[dict]]:
    """Count one row's results into its split's figures; (its paid answers shown wrong, its set-aside ones)."""
    paid: dict[str, list[dict]] = collections.defaultdict(list)
    aside: dict[str, list[dict]] = collections.defaultdict(list)
    for scored in results:
        policy, sql, found = scored.candidate.policy, scored.candidate.sql, scored.finding
        paid.setdefault(policy, [])
        if scored.paid and found is not None and found.witness:
            paid[policy].append({"policy": policy, "sql": sql, "witness": found.witness})
        elif scored.paid:
            aside[policy].append({"policy": policy, "sql": sql, "breaks": list(found.breaks if found else ())})
    for policy, shown in paid.items():
        entry = split["policies"][policy]
        entry["applies"] += 1
        entry["paid"] += bool(shown)
        entry["set_aside"] += bool(aside[policy]) and not shown
    return [f for fs in paid.values() for f in fs], [f for fs in aside.values() for f in fs]


def document(loaded: LoadedBundle, results: list[tuple[AuditRow, list[Scored]]], splits: tuple[str, ...],
             work: dict, seconds: float) -> dict:
    """The audit's JSON document (module docstring)."""
    figures: dict[str, dict[str, Any]] = {s: {"rows": 0, "hackable": 0, "hackable_first_seven": 0, "set_aside_rows": 0,
                   "policies": {p.name: {"applies": 0, "paid": 0, "set_aside": 0} for p in POLICIES}} for s in splits}
    hackable, set_aside, unscored = [], [], []
    for row, scored in results:
        split = figures[row.split]
        split["rows"] += 1
        entry = {"id": row.id, "split": row.split, "db_id": row.db_id, "gold": row.gold}
        paid, aside = _tally(split, scored)
        if paid:
            split["hackable"] += 1
            split["hackable_first_seven"] += any(f["policy"] in FIRST_SEVEN for f in paid)
            hackable.append({**entry, "paid": paid})
        elif aside:
            split["set_aside_rows"] += 1
            set_aside.append({**entry, "answers": aside})
        unscored += [{"id": row.id, "policy": s.candidate.policy, "sql": s.candidate.sql, "detail": s.call.detail}
                     for s in scored if s.call.kind != "scored"]
    for split in figures.values():
        split["share"] = _share(split["hackable"], split["rows"])
    work = {"candidates": sum(len(s) for _row, s in results), "paid": sum(1 for _row, s in results for x in s if x.paid),
            **work}
    return {"format": FORMAT, "version": VERSION, **_bundle_facts(loaded), "splits": figures,
            "hackable": hackable, "set_aside": set_aside, "unscored": unscored, "work": work,
            "seconds": round(seconds, 1)}


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def table(doc: dict) -> list[str]:
    """The issue's table: per policy the share of the rows it applies to on which it is paid, per split."""
    splits = list(doc["splits"])
    label = {p.name: p.label for p in POLICIES}
    unions = (("hackable_first_seven", "at least one of the first seven"), ("hackable", "at least one of these (the union)"))
    width = max(len(text) for text in [*label.values(), *(text for _key, text in unions)]) + 2  # every label whole
    head = f"{'policy':<{width}}" + "".join(f"{s + ' rows':>24}" for s in splits)
    lines = [head, "-" * len(head)]
    for policy in label:
        cells = []
        for s in splits:
            entry = doc["splits"][s]["policies"][policy]
            aside = f" +{entry['set_aside']}?" if entry["set_aside"] else ""
            cells.append(f"{_percent(entry['paid'], entry['applies'])} ({entry['paid']} of {entry['applies']}){aside}")
        lines.append(f"{label[policy]:<{width}}" + "".join(f"{c:>24}" for c in cells))
    for key, label_text in unions:
        cells = [f"{_percent(doc['splits'][s][key], doc['splits'][s]['rows'])} ({doc['splits'][s][key]} of "
                 f"{doc['splits'][s]['rows']})" for s in splits]
        lines.append(f"{label_text:<{width}}" + "".join(f"{c:>24}" for c in cells))
    return lines


def rows(doc: dict) -> list[str]:
    """The rows behind the table: each hackable row with its gold and every answer paid and shown wrong
    (policy, SQL, the witness database that shows it), then each set-aside row with its paid answers."""
    lines = [f"hackable rows ({len(doc['hackable'])}): a degenerate answer is paid 1.0 and shown wrong"
             if doc["hackable"] else "hackable rows: none"]
    for row in doc["hackable"]:
        lines.append(f"  {row['id']} ({row['db_id']}) gold: {row['gold']}")
        lines += [f"    {paid['policy']}: {paid['sql']}   [shown wrong on: {paid['witness']}]" for paid in row["paid"]]
    if doc["set_aside"]:
        lines.append(f"set aside ({len(doc['set_aside'])}): paid, but no fair witness tells the answer from its gold")
    for row in doc["set_aside"]:
        lines.append(f"  {row['id']} ({row['db_id']}) gold: {row['gold']}")
        lines += [f"    {answer['policy']}: {answer['sql']}"
                  + (f"   [a witness would break: {', '.join(answer['breaks'])}]" if answer["breaks"] else "")
                  for answer in row["answers"]]
    return lines


def render(doc: dict) -> list[str]:
    """The table, then a line on what was set aside, what could not be scored and the work done."""
    lines = [f"degenerate answers paid 1.0 and shown wrong on a witness database ({doc['semantics']} semantics, "
             f"{doc['neighbour_databases']} neighbour databases); +N? = paid but set aside: no witness tells it "
             "from its gold", *table(doc)]
    fair = doc.get("rewrites") or {"splits": {}}
    if any(s["scored"] for s in fair["splits"].values()):
        cells = "; ".join(f"{name} {s['rejected']} of {s['scored']}" for name, s in fair["splits"].items())
        lines.append(f"equivalent rewrites rejected ({fair['corpus']}, golds in these splits): {cells}")
    aside = sum(s["set_aside_rows"] for s in doc["splits"].values())
    if aside:
        lines.append(f"set aside (paid, but possibly equivalent to the gold): {aside} more rows; see the JSON's set_aside")
    work = doc["work"]
    unfair = ", ".join(f"{kind} {n}" for kind, n in sorted(work["unfair_by"].items())) or "none"
    lines.append(f"{work['candidates']} candidate answers ({work['calls']} distinct calls), {work['paid']} paid 1.0 and "
                 f"tried on {work['witnesses']} witness databases ({work['unfair']} not used: they break an invariant, "
                 f"{unfair}); {doc['seconds']} s")
    return lines


def problems(doc: dict, threshold: float) -> list[str]:
    """Why the audit fails: splits over ``threshold``, and candidate calls the bundle did not score
    (a model's answer must get a score, never an error: the figures would be incomplete)."""
    out = over_threshold(doc, threshold)
    if doc["unscored"]:
        first = doc["unscored"][0]
        out.append(f"{len(doc['unscored'])} candidate answers raised instead of scoring (first: {first['id']} "
                   f"{first['policy']}: {first['detail'][:160]})")
    return out


def over_threshold(doc: dict, threshold: float) -> list[str]:
    """One line per split whose hackable share is over ``threshold`` (a fraction); none: the audit passes."""
    out = []
    for name, split in doc["splits"].items():
        if split["rows"] and split["hackable"] / split["rows"] > threshold:
            out.append(f"{name}: {split['hackable']} of {split['rows']} rows hackable "
                       f"({_percent(split['hackable'], split['rows'])}), over the threshold of {100 * threshold:.1f}%")
    return out
