"""prepare's summary: rows per split, skips per reason, databases and their size, prompt lengths, the audit.

The same dict is printed (``render``) and written as ``prepare-summary.json`` (``dumps``). All of
it follows from the inputs except ``fetch`` (pages fetched or read from the cache, retries), which
says how this run got its rows.

>>> render_count({"gold query fails": 3, "database missing": 1})
'database missing 1, gold query fails 3'
"""

from __future__ import annotations

import collections
import json

from bundle.search import difference as difference_search
from harness.common import prompts
from harness.common.errors import InputError
from harness.prepare import splits, thin_summary

FORMAT = "spider-scoring-prepare-summary"
VERSION = 1
# Why the search aimed at the difference lets a column repeat (docs/neighbours.md, "Only fair edits judge").
CHANCE_WHY = ("numbers unique on the original's few rows by chance, not a key: an edit may repeat them, "
              "unless the gold sorts by the column or takes its min or max")
# Which trainer limit each split's rows must fit (the eval rows are generated like GRPO's).
LIMIT_FOR_SPLIT = {"train": ("over_sft", prompts.SFT_MAX_TOKENS, "SFT"),
                   "rl": ("over_grpo", prompts.GRPO_MAX_TOKENS, "GRPO")}


def render_count(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items())) or "none"


def _skips(selection: splits.Selection) -> dict[str, dict[str, int]]:
    return {source: dict(sorted(counter.items())) for source, counter in sorted(selection.skips.items())}


def check_not_empty(selection: splits.Selection, sizes: splits.Sizes) -> None:
    """A split asked for but left with no row is an error: most likely the wrong --databases."""
    for name in splits.SPLITS:
        asked = getattr(sizes, name)
        if asked and not selection.split(name):
            source = "validation" if name == "eval" else "train"
            skipped = render_count(dict(selection.skips.get(source, {})))
            missing = sorted(selection.skipped_databases.get(splits.SKIP_DATABASE_MISSING, ()))
            lacking = (f" The questions name databases --databases lacks: {', '.join(missing[:10])}"
                       + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
                       + " (give the folder that holds them; --databases again for another folder).") if missing else ""
            raise InputError(
                f"no usable row for the {name} split ({asked} asked); {source} rows left out: {skipped}.{lacking} "
                "Check that --databases is Spider's database folder, or lower --rows/--rl-rows")


def _databases(selection: splits.Selection, index: dict) -> dict:
    entries = index["databases"]
    eval_order = list(dict.fromkeys(r.db_id for r in selection.eval))
    training = sorted({r.db_id for r in selection.train + selection.rl})
    return {
        "count": len(entries),
        "bytes": sum(e["bytes"] for e in entries.values()),
        "training": training,
        "eval": eval_order,
        "skipped": {reason: sorted(dbs) for reason, dbs in sorted(selection.skipped_databases.items())},
    }


def _warnings(sizes: splits.Sizes, written: dict[str, int], stats: dict[str, dict], dropped: int = 0) -> list[str]:
    """A split the source left short (rl rows --drop-hackable left out do not count), prompts too long."""
    notes = []
    for name in splits.SPLITS:
        asked = getattr(sizes, name)
        if written[name] + (dropped if name == "rl" else 0) < asked:
            notes.append(f"{name}: {written[name]} rows of {asked} asked: the source ran out of usable rows")
    for name, (key, limit, stage) in LIMIT_FOR_SPLIT.items():
        if stats[name][key]:
            notes.append(f"{name}: {stats[name][key]} rows may not fit {stage} maxSeqLength {limit} "
                         f"(estimated; longest prompt ~{stats[name]['max_tokens']} tokens): lower "
                         "--max-schema or raise the trainer's maxSeqLength")
    return notes


def disputed_section(selection: splits.Selection, rules: splits.Rules, index: dict) -> dict:
    """The disputed golds (harness.prepare.disputed): the list used, the rows of each split whose gold
    it names (judged against the gold and its accepted answers), and the train rows it kept out of rl."""
    marked: dict[str, list[dict]] = {}
    for row in index["rows"]:
        if row.get("disputed"):
            marked.setdefault(row["split"], []).append({"row": row["id"], "db_id": row["db_id"],
                                                        "disputed": row["disputed"]})
    return {"list": str(rules.disputed.path), "golds": len(rules.disputed.golds),
            "rows": {name: marked.get(name, []) for name in splits.SPLITS},
            "left_out_of_rl": [{"index": r.index, "db_id": r.db_id, "question": r.question,
                                "disputed": rules.disputed_id(r)} for r in selection.left_out_disputed]}


def neighbours(built: dict, index: dict, chosen: tuple[str, ...]) -> dict:
    """What the neighbour databases are: per database the count and bytes, the invariants they keep
    (every one, proved: ``invariants`` counts them), and what they separate."""
    entries = index["databases"]
    per_db = {db_id: {"kept": len(d.files), "bytes": sum(e["bytes"] for e in entries[db_id].get("neighbours", [])),
                      "candidates": d.candidates_built, "refused": d.candidates_refused, "look_alikes": d.targets,
                      "separated": d.separated, "constants": d.constants, "constants_separated": d.constants_separated,
                      "not_judged": d.unjudged, "invariants": d.profile.counts()}
              for db_id, d in sorted(built.items())}
    for db_id, d in built.items():
        per_db[db_id]["unique_by_chance"] = [
            {"column": f"{t}.{c}", "rows": next(x.rows for x in d.profile.tables if x.name == t),
             "why": CHANCE_WHY} for t, c in difference_search.unique_by_chance(d.profile)]
        why = {h.neighbour: h.why for h in d.hidden if h.neighbour is not None}
        per_db[db_id]["relaxed"] = [{"neighbour": k + 1, **r.to_json(), "why": why.get(k + 1, "")}
                                    for k, items in sorted(d.relaxed.items()) for r in items]
        thin = thin_summary.section(d, index.get("rows") or [])
        if thin is not None:  # a thin database only (docs/neighbours.md, "Thin databases")
            per_db[db_id]["thin"] = thin
    total = {key: sum(v[key] for v in per_db.values())
             for key in ("kept", "bytes", "look_alikes", "separated", "constants", "constants_separated")}
    return {"splits": list(chosen), "databases": per_db, "total": total, "hidden": hidden_section(built)}


def hidden_section(built: dict) -> dict:
    """The golds whose question a kept invariant hid (harness.prepare.neighbours.relax): how many per
    invariant kind before and after the relaxed neighbours, and each with what was done and why."""
    found = [h for d in built.values() for h in d.hidden]

    def kind(h) -> str:
        return (h.relaxed or h.asks[0]).kind

    return {"before": dict(sorted(collections.Counter(kind(h) for h in found).items())),
            "after": dict(sorted(collections.Counter(kind(h) for h in found if h.relaxed is None).items())),
            "golds": [h.as_json() for h in sorted(found, key=lambda h: (h.db_id, h.gold))]}


def build(selection: splits.Selection, sizes: splits.Sizes, rules: splits.Rules,
          rows: dict[str, list[dict]], index: dict, *, fetch: dict, origin: str,
          neighbours: dict | None = None, audit: dict | None = None) -> dict:
    """The summary of one prepare run (module docstring)."""
    written = {name: len(rows[name]) for name in splits.SPLITS}
    stats = {name: prompts.prompt_stats(rows[name]) for name in splits.SPLITS}
    totals: collections.Counter = collections.Counter()
    for counter in selection.skips.values():
        totals.update(counter)
    return {
        "format": FORMAT,
        "version": VERSION,
        "source": origin,
        "settings": {"rows": sizes.train, "rl_rows": sizes.rl, "eval_rows": sizes.eval,
                     "max_schema": rules.catalog.max_schema, "keep_empty_gold": rules.keep_empty_gold,
                     "keep_shared_golds": rules.keep_shared_golds, "keep_disputed": rules.keep_disputed,
                     "reward_shape": (index.get("reward_shape") or {}).get("name", "binary")},
        "rows": written,
        "rows_read": dict(selection.rows_read),
        "skips": _skips(selection),
        "skips_total": dict(sorted(totals.items())),
        "shared_golds": sorted(selection.shared_golds),
        "gold_failures": [{"db_id": db_id, "gold": gold, "why": why}
                          for (db_id, gold), why in sorted(rules.golds.failures.items())],
        "databases": _databases(selection, index),
        "disputed": disputed_section(selection, rules, index),
        "neighbours": neighbours or {"splits": [], "databases": {}, "total": {}},
        "audit": audit,  # harness.audit's document without its run fields; None when prepare ran with --no-audit
        "prompts": stats,
        "warnings": _warnings(sizes, written, stats, len((audit or {}).get("dropped") or [])),
        "fetch": fetch,
    }


def _render_neighbours(found: dict) -> str:
    total = found.get("total") or {}
    if not total:
        return "neighbour databases: none (prepare --neighbours none)"
    return (f"neighbour databases: {total['kept']} for {len(found['databases'])} databases of "
            f"{'/'.join(found['splits'])}, {total['bytes']:,} bytes ({total['bytes'] / 1e6:.1f} MB); they tell "
            f"{total['separated']} of {total['look_alikes']} look-alike queries and {total['constants_separated']} "
            f"of {total['constants']} constant answers from their golds where the original database cannot")


def _many(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _render_chance(found: dict) -> list[str]:
    """The columns the search aimed at the difference lets repeat, in a line."""
    named = [f"{db_id} {c['column']}" for db_id, d in (found.get("databases") or {}).items()
             for c in d.get("unique_by_chance", [])]
    if not named:
        return []
    return [f"unique by chance (an edit of the search aimed at the difference may repeat them): {len(named)} columns "
            "of numbers: " + ", ".join(named[:4]) + ("; ..." if len(named) > 4 else "")
            + " (prepare-summary.json, neighbours.databases.*.unique_by_chance)"]


def _render_hidden(found: dict) -> list[str]:
    """The relaxed neighbours in a line: per database the invariant relaxed and for how many golds."""
    hidden = (found or {}).get("hidden") or {}
    if not hidden.get("golds"):
        return []
    relaxed = [f"{db_id} {r['kind']} {r['subject']} ({_many(len(r['golds']), 'gold')})"
               for db_id, d in found["databases"].items() for r in d.get("relaxed", [])]
    before, after = sum(hidden["before"].values()), sum(hidden["after"].values())
    return [f"invariants that hid a question: {_many(before, 'gold')} answered alike on every neighbour, a kept "
            f"invariant ruling out what they ask ({render_count(hidden['before'])}); {before - after} told apart by "
            f"{_many(len(relaxed), 'relaxed neighbour')}: " + "; ".join(relaxed[:4]) + ("; ..." if len(relaxed) > 4 else "")
            + f"; {after} still hidden (prepare-summary.json, neighbours.hidden)"]


def _render_audit(found: dict | None) -> list[str]:
    """The audit's section in a few lines: the hackable share per split, the rows dropped from rl."""
    if not found:
        return ["audit: not run (prepare --no-audit)"]
    if "not_run" in found:
        return [f"audit: not run: {found['not_run']}"]
    shares = ", ".join(f"{name} {s['hackable']} of {s['rows']} rows ({100 * s['hackable'] / s['rows']:.1f}%)"
                       for name, s in found["splits"].items() if s["rows"])
    if not shares:
        return ["audit: no rl or eval row to audit"]
    aside = sum(s["set_aside_rows"] for s in found["splits"].values())
    lines = [f"audit: hackable (a degenerate answer paid 1.0 and shown wrong on a witness database): {shares}; "
             f"{aside} more set aside as possibly equivalent (`python3 -m harness audit` prints the table)"]
    done = found.get("separation")
    if done:
        before = ", ".join(f"{name} {s['hackable']}" for name, s in done["before"].items() if s["rows"])
        lines.append(f"separation: {done['closed']} of {done['holes']} holes closed by {sum(done['added'].values())} "
                     f"neighbour databases added to {len(done['added'])} databases (hackable rows before: {before}); "
                     "the rest named in prepare-summary.json (audit.separation.outcomes)")
    lines += _render_near_misses(found.get("near_misses"), (done or {}).get("near_misses_before"))
    dropped = found.get("dropped") or []
    if dropped:
        lines.append(f"dropped from rl (--drop-hackable): {len(dropped)} rows, named in prepare-summary.json (audit.dropped): "
                     + "; ".join(f"{e['db_id']}: {e['gold'][:60]}" for e in dropped[:3]) + ("; ..." if len(dropped) > 3 else ""))
    return lines


def _rate(counts: dict) -> str:
    killable = counts["killed"] + counts["missed"]
    return f"{100 * counts['killed'] / killable:.1f}%" if killable else "-"


def _render_near_misses(found: dict | None, before: dict | None) -> list[str]:
    """The near misses in a line per split: killed, killable but missed, blocked (by what), equivalent."""
    if not found:
        return []
    if "not_run" in found:
        return [f"near misses: not measured: {found['not_run']}"]
    lines = ["near misses of the golds (harness audit prints the table per family; docs/audit.md, \"Near misses\"):"]
    for name, split in found["splits"].items():
        every, groups = split["groups"]["all"], split["groups"]
        blocked = ", ".join(f"{kind} {n}" for kind, n in every["blocked_by"].items())
        was = (before or {}).get(name)
        lines.append(f"  {name}: killed {every['killed']} of {every['killed'] + every['missed']} killable "
                     f"({_rate(every)}; tuning {_rate(groups['tuning'])}, held-out {_rate(groups['held_out'])}), "
                     f"missed {every['missed']} on {split['rows_with_missed']} rows, blocked {every['blocked']}"
                     + (f" ({blocked})" if blocked else "") + f", equivalent {every['equivalent']}, "
                     f"rejected on the original {every['original']}"
                     + (f"; before the separation {was['missed']} missed (build seeds)" if was else ""))
    return lines


def _render_disputed(found: dict | None) -> list[str]:
    """The disputed golds in a line or two: rows judged against their accepted answers too, rows kept out of rl, named."""
    if not found:
        return []
    marked = {name: rows for name, rows in found["rows"].items() if rows}
    out = found["left_out_of_rl"]
    if not marked and not out:
        return [f"disputed golds: none of the {found['golds']} listed is in the splits"]
    ids = sorted({r["disputed"] for rows in marked.values() for r in rows})
    lines = ["disputed golds (judged against the gold and its accepted answers): "
             + (", ".join(f"{name} {len(rows)} rows" for name, rows in marked.items()) or "no row")
             + (f" of {len(ids)} golds ({', '.join(ids[:4])}{', ...' if len(ids) > 4 else ''}; all named in "
                "prepare-summary.json, disputed)" if ids else "")]
    if out:
        lines.append(f"  left out of rl (--keep-disputed keeps them): {len(out)}: "
                     + ", ".join(f"train {r['index']} ({r['disputed']})" for r in out[:4]) + (", ..." if len(out) > 4 else ""))
    return lines


def dumps(summary: dict) -> bytes:
    return (json.dumps(summary, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def render(summary: dict) -> str:
    """The summary as a few lines for a terminal or a CI log."""
    rows, dbs, fetch = summary["rows"], summary["databases"], summary["fetch"]
    settings = summary["settings"]
    lines = [
        f"rows written: train {rows['train']}, rl {rows['rl']}, eval {rows['eval']} "
        f"(asked {settings['rows']} / {settings['rl_rows']} / {settings['eval_rows']}; "
        f"from {summary['source']})",
        "rows read: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["rows_read"].items())),
        "left out: " + render_count(summary["skips_total"]),
    ]
    for source, counts in summary["skips"].items():
        lines.append(f"  {source}: {render_count(counts)}")
    if settings.get("reward_shape", "binary") != "binary":
        lines.append(f"reward shape: {settings['reward_shape']} (the reward pays it per outcome; the grader stays "
                     "binary; docs/reward-shapes.md)")
    lines.append(f"databases: {dbs['count']} used ({len(dbs['training'])} train/rl, "
                 f"{len(dbs['eval'])} eval), {dbs['bytes']:,} bytes ({dbs['bytes'] / 1e6:.1f} MB)")
    for reason, names in dbs["skipped"].items():
        lines.append(f"  skipped ({reason}): {', '.join(names)}")
    lines.extend(_render_disputed(summary.get("disputed")))
    lines.append(_render_neighbours(summary.get("neighbours") or {}))
    lines.extend(_render_hidden(summary.get("neighbours") or {}))
    lines.extend(_render_chance(summary.get("neighbours") or {}))
    lines.extend(thin_summary.render(summary.get("neighbours") or {}))
    lines.extend(_render_audit(summary.get("audit")))
    if summary["shared_golds"]:
        verb = "kept" if settings["keep_shared_golds"] else "left out"
        lines.append(f"golds under several databases ({verb}): {len(summary['shared_golds'])}")
    for name, stat in summary["prompts"].items():
        lines.append(f"prompts {name}: longest {stat['max_chars']} chars (~{stat['max_tokens']} tokens), "
                     f"mean {stat['mean_chars']} chars (~{stat['mean_tokens']} tokens); over SFT "
                     f"{prompts.SFT_MAX_TOKENS}: {stat['over_sft']}, over GRPO {prompts.GRPO_MAX_TOKENS}: "
                     f"{stat['over_grpo']}")
    if fetch["files_read"]:
        lines.append(f"rows read from {fetch['files_read']} local files (no network)")
    else:
        lines.append(f"fetch: {fetch['pages_fetched']} pages fetched, {fetch['pages_cached']} from cache, "
                     f"{fetch['retries']} retries, {fetch['waited_s']} s waited")
    lines.extend(f"warning: {note}" for note in summary["warnings"])
    return "\n".join(lines)
