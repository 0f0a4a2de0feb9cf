"""The near-miss measurement's table, its rows, and the kill-rate threshold ``verify`` and ``audit`` hold.

Per family and split: near misses killed of the killable ones (killed + missed) with the kill
rate, then missed, blocked (the kinds of invariant named in the JSON) and equivalent; then the
tuning families, the held-out ones and all of them.

>>> counts = {"killed": 90, "missed": 10}
>>> doc = {"splits": {"rl": {"groups": {"all": counts}}}, "unscored": []}
>>> below(doc, 0.95)
['rl: near misses killed 90 of 100 killable (90.0%), under the least kill rate of 95.0%']
"""

from __future__ import annotations

from collections.abc import Mapping

# The least kill rate (killed / (killed + missed)) `verify` and `audit` accept on a split: a gate
# against a reward whose neighbours stopped telling golds from their near misses, met by today's
# default Spider bundle (docs/audit.md, "Near misses"). The goal (issue 25) is 99%:
# `--min-kill-rate 99%` holds a bundle to it.
DEFAULT_MIN_KILL_RATE = 0.90
GOAL = 0.99
GROUP_LABELS = {"tuning": "tuning families", "held_out": "held-out families", "all": "all families"}


def rate(counts: Mapping) -> str:
    killable = counts["killed"] + counts["missed"]
    return f"{100 * counts['killed'] / killable:.1f}%" if killable else "-"


def cell(counts: Mapping) -> str:
    """``killed/killable (rate) m missed, b blocked, e equivalent``."""
    return (f"{counts['killed']}/{counts['killed'] + counts['missed']} ({rate(counts)}) {counts['missed']}m "
            f"{counts['blocked']}b {counts['equivalent']}e")


def table(doc: dict) -> list[str]:
    """Per family (and group) and split: killed of killable, missed, blocked, equivalent."""
    splits = list(doc["splits"])
    families = sorted({f for s in doc["splits"].values() for f in s["families"]},
                      key=lambda f: (doc["families"].get(f, {}).get("group", "other") != "tuning", f))
    width = max([len(f) + 11 for f in families] + [len(label) for label in GROUP_LABELS.values()]) + 2
    head = f"{'family':<{width}}" + "".join(f"{s:>40}" for s in splits)
    lines = [head, "-" * len(head)]
    for family in families:
        group = doc["families"].get(family, {}).get("group", "other").replace("_", "-")
        cells = [cell(doc["splits"][s]["families"][family]) if family in doc["splits"][s]["families"] else "-"
                 for s in splits]
        lines.append(f"{family + ' (' + group + ')':<{width}}" + "".join(f"{c:>40}" for c in cells))
    for group, label in GROUP_LABELS.items():
        lines.append(f"{label:<{width}}" + "".join(f"{cell(doc['splits'][s]['groups'][group]):>40}" for s in splits))
    return lines


def render(doc: dict) -> list[str]:
    """The headline per split, the table, what blocks, and the work done."""
    if "not_run" in doc:
        return [f"near misses: not measured: {doc['not_run']}"]
    heads = []
    for name, split in doc["splits"].items():
        every = split["groups"]["all"]
        heads.append(f"{name} {rate(every)} ({every['killed']} of {every['killed'] + every['missed']}; "
                     f"tuning {rate(split['groups']['tuning'])}, held-out {rate(split['groups']['held_out'])}; "
                     f"{split['rows_with_missed']} of {split['rows']} rows with a paid wrong near miss"
                     + (f", {split['disputed_left_out']} disputed rows left out" if split["disputed_left_out"] else "")
                     + ")")
    lines = ["near misses of the golds the bundle could reject and does (kill rate = killed / (killed + missed)): "
             + "; ".join(heads),
             "cells: killed/killable (rate), m missed (a fair database shows it wrong; no neighbour does), b blocked "
             "(only a database giving up an invariant does), e equivalent (none does)", *table(doc)]
    for name, split in doc["splits"].items():
        blocked = split["groups"]["all"]["blocked_by"]
        if blocked:
            lines.append(f"{name}: blocked by " + ", ".join(f"{kind} {n}" for kind, n in blocked.items()))
    work = doc["work"]
    lines.append(f"{work['near_misses']} near misses of {work['golds']} golds ({work['calls']} calls), {work['paid']} "
                 f"paid as their gold and put to the oracle ({doc['oracle']['purpose']} seeds, "
                 f"{work['oracle_databases']} databases built)"
                 + (f"; {doc['seconds']} s" if "seconds" in doc else ""))
    if work["generator_failed"]:
        first = work["generator_failed"][0]
        lines.append(f"the generator failed on {len(work['generator_failed'])} golds (first: {first['db_id']}: "
                     f"{first['error'][:120]})")
    return lines


def rows(doc: dict, most: int = 50) -> list[str]:
    """The missed near misses (at most ``most``), each with its row, gold and witness database."""
    if "not_run" in doc or not doc["missed"]:
        return []
    lines = [f"missed near misses ({len(doc['missed'])}): paid, and shown wrong on a database keeping every invariant"]
    for entry in doc["missed"][:most]:
        lines += [f"  {entry['id']} ({entry['db_id']}) gold: {entry['gold']}",
                  f"    {entry['family']}: {entry['sql']}   [shown wrong on: {entry['witness']}]"]
    if len(doc["missed"]) > most:
        lines.append(f"  ... {len(doc['missed']) - most} more in the JSON (near_misses.missed)")
    return lines


def below(doc: dict, least: float) -> list[str]:
    """Why the measurement fails: a split whose kill rate (all families) is under ``least``, near
    misses the bundle raised on instead of scoring."""
    if "not_run" in doc:
        return []
    out = []
    for name, split in doc["splits"].items():
        every = split["groups"]["all"]
        killable = every["killed"] + every["missed"]
        if killable and every["killed"] / killable < least:
            out.append(f"{name}: near misses killed {every['killed']} of {killable} killable ({rate(every)}), "
                       f"under the least kill rate of {100 * least:.1f}%")
    if doc["unscored"]:
        first = doc["unscored"][0]
        out.append(f"{len(doc['unscored'])} near misses raised instead of scoring (first: {first['id']} {first['family']}: "
                   f"{first['sql'][:120]})")
    return out
