"""The `report` command: compare per-row results of two or more stages (e.g. base, SFT, GRPO).

    python3 -m harness report base=out/results-base.jsonl sft=out/results-sft.jsonl \\
        rl=out/results-rl.jsonl --baseline sft --markdown out/report.md --html out/report.html

Each input is a per-row results file (harness/results.py) from the `grade` command, named
``label=path`` (or ``--name label=path``; a bare path is labelled with its file stem). Every file must
hold the same eval rows with the same gold, else the command stops with an error naming the
difference: a table over different rows would compare nothing.

The report (README, "Grading and reports"): execution accuracy per stage with a 95% interval (beside
it, where the bundle judged with neighbour databases, the accuracy on the original database alone,
and the rows only the original accepted), rows gained and lost against the baseline with McNemar's
tests and a verdict, the changed rows side by side with the structural edits between them and the
table of those edits (harness/report/edits.py: what the reward promotes), accuracy by Spider
difficulty level, by database and, when some row's gold is disputed, by gold, and, given a stage's training reward log, the curve's trend against
its spread beside the held-out delta (reward_log.py, trend.py). Printed as a table; written as
Markdown and as a self-contained HTML page with charts when asked.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.common.errors import InputError
from harness.common.layout import DEFAULT_DATA, Prepared
from harness.common.results import RowResult, read_results, read_results_meta, samples_path
from harness.common.rows import read_split
from harness.report import leaderboards, sampling
from harness.report import stats as report_stats
from harness.report.difficulty import LEVELS, DifficultyError, difficulty
from harness.report.edits import Edit, EditCount, edits_between, tally
from harness.report.reward_log import RewardCurve, RewardLogError
from harness.report.stats import Accuracy, Paired
from harness.report.trend import Trend, TrendError, fit_trend

UNCLASSIFIED = "unclassified"
DISPUTED = "disputed (judged against the gold and its accepted answers)"  # the gold breakdown's groups (docs/disputed-golds.md)
UNDISPUTED = "undisputed"


@dataclasses.dataclass(frozen=True)
class Stage:
    label: str
    path: str
    rows: tuple[RowResult, ...]


@dataclasses.dataclass(frozen=True)
class ChangedRow:
    """One row whose correctness differs between the baseline and a candidate."""

    row_id: str
    db_id: str
    level: str
    question: str
    gold: str
    baseline_sql: str | None
    candidate_sql: str | None
    baseline_outcome: str
    candidate_outcome: str
    edits: tuple[Edit, ...] = ()  # from the baseline's SQL to the candidate's, judged against the gold


@dataclasses.dataclass(frozen=True)
class Comparison:
    label: str
    paired: Paired
    gained: tuple[ChangedRow, ...]
    lost: tuple[ChangedRow, ...]
    edit_table: tuple[EditCount, ...] = ()  # what the reward promotes: edits among gained and lost rows


@dataclasses.dataclass(frozen=True)
class OriginalOnly:
    """A row the original database accepted and a neighbour database did not (test-suite semantics)."""

    row_id: str
    db_id: str
    level: str
    question: str
    gold: str
    sql: str | None
    decided_on: str
    detail: str


@dataclasses.dataclass(frozen=True)
class StageSummary:
    label: str
    path: str
    accuracy: Accuracy  # under the bundle's semantics (the test suite, where it has neighbours)
    unscored: int
    original: Accuracy  # on the original database alone
    original_only: tuple[OriginalOnly, ...] = ()


@dataclasses.dataclass(frozen=True)
class Breakdown:
    """Accuracy per group (a difficulty level, a database), one Accuracy per stage in stage order."""

    title: str
    groups: tuple[tuple[str, tuple[Accuracy, ...]], ...]


@dataclasses.dataclass(frozen=True)
class RewardTrend:
    """A stage's training reward log and its trend against its spread, shown beside its held-out delta."""

    label: str
    curve: RewardCurve
    trend: Trend


@dataclasses.dataclass(frozen=True)
class Report:
    rows: int
    baseline: str
    alpha: float
    test: str
    stages: tuple[StageSummary, ...]
    comparisons: tuple[Comparison, ...]  # every stage but the baseline, in stage order
    by_level: Breakdown
    by_database: Breakdown
    test_suite: bool = False  # some verdict was decided with neighbour databases: show both accuracies
    by_gold: Breakdown | None = None  # rows on disputed golds apart, when there are some
    rewards: tuple[RewardTrend, ...] = ()  # in stage order
    leaderboards: tuple[leaderboards.StageRules, ...] = ()  # stages graded with the leaderboards' columns
    without_leaderboards: tuple[str, ...] = ()  # stages graded before them
    sampled: tuple[tuple[str, sampling.Sampled], ...] = ()  # stages graded with n samples a row

    def breakdowns(self) -> tuple[Breakdown, ...]:
        """The breakdowns to show, in order: difficulty, database, and disputed golds when any."""
        return (self.by_level, self.by_database) + ((self.by_gold,) if self.by_gold is not None else ())


DEFAULT_PREPARED = Prepared(DEFAULT_DATA)


def parse_spec(text: str, data: Prepared = DEFAULT_PREPARED) -> tuple[str, str]:
    """``label=path``; a bare path (labelled with its stem); or a stage name, whose results are
    ``results/STAGE.jsonl`` in the prepared folder ``data``.

    >>> parse_spec("sft=out/results/sft.jsonl"), parse_spec("base")
    (('sft', 'out/results/sft.jsonl'), ('base', 'out/results/base.jsonl'))
    """
    label, sep, path = text.partition("=")
    # a path that itself holds "=" but names an existing file is a bare path
    if Path(text).is_file():
        return Path(text).stem, text
    if not sep:
        if "/" not in text and not text.endswith(".jsonl"):
            return text, data.results(text).as_posix()
        return Path(text).stem, text
    if not label.strip() or not path:
        raise InputError(f"{text!r}: give results as label=path (e.g. sft=out/results-sft.jsonl) or a path")
    return label.strip(), path


def load_stages(specs: list[tuple[str, str]]) -> list[Stage]:
    """Read every results file and check they describe the same eval rows (InputError if not)."""
    if len(specs) < 2:
        raise InputError(f"the report compares two or more results files, got {len(specs)}; "
                         "pass e.g. base sft (their results in DATA/results/) or base=FILE sft=FILE")
    labels = [label for label, _ in specs]
    for label in labels:
        if labels.count(label) > 1:
            raise InputError(f"two inputs are labelled {label!r}; name each one with label=path")
    stages = []
    for label, path in specs:
        if not Path(path).is_file():
            raise InputError(f"the results of {label}, {path}, do not exist: grade that stage first "
                             f"(`make grade STAGE={label}`), or give label=path")
        rows = read_results(path)
        if not rows:
            raise InputError(f"{path} ({label}) holds no rows; grade the eval split into it first")
        stages.append(Stage(label, str(path), tuple(rows)))
    for other in stages[1:]:
        _check_same_rows(stages[0], other)
    order = {r.row_id: i for i, r in enumerate(stages[0].rows)}
    # every stage in the first file's row order, so rows pair up by position from here on
    return [dataclasses.replace(s, rows=tuple(sorted(s.rows, key=lambda r: order[r.row_id]))) for s in stages]


def _sampled(stage: Stage) -> sampling.Sampled | None:
    """pass@k and majority@k from the stage's samples file (``grade`` with n completions a row), or
    None when it has none; InputError when that file answers other rows than the stage's results."""
    path = samples_path(stage.path)
    if not path.is_file():
        return None
    every = read_results(path)
    firsts = {r.row_id: r for r in every if r.sample == 0}
    if set(firsts) != {r.row_id for r in stage.rows} or any(firsts[r.row_id].score != r.score for r in stage.rows):
        raise InputError(f"{path} ({stage.label}'s samples) does not hold the rows of {stage.path} as their first "
                         f"samples: they were graded apart. Grade the stage again (`make grade STAGE={stage.label}`), "
                         "or delete the samples file")
    return sampling.figures(every)


def check_generation(stages: list[Stage], data: Prepared) -> None:
    """Results read from the prepared folder (``DATA/results/STAGE.jsonl``) must be results of its
    current eval split and, where ``grade`` noted it, of one bundle: a ``prepare`` into a folder that
    held graded results leaves them there, and a report of them against the new split would mix two
    generations. InputError naming the stage and what to do; results given as ``label=path`` are
    the user's to vouch for, and are not checked."""
    folder = data.results("x").parent.resolve()
    mine = [s for s in stages if Path(s.path).resolve().parent == folder]
    split_path = data.split("eval")
    split = read_split(split_path, "eval") if mine and split_path.is_file() else []
    for stage in mine if split else []:
        golds = {r.row_id: " ".join(r.gold.split()) for r in stage.rows}
        wanted = {r.id: " ".join(r.gold.split()) for r in split}
        if golds != wanted:
            differs = next((i for i in wanted if golds.get(i) != wanted[i]), None) or next(i for i in golds if i not in wanted)
            raise InputError(f"the results of {stage.label} ({stage.path}, {len(golds)} rows) were graded on another eval "
                             f"split than {split_path} ({len(wanted)} rows; first difference: row {differs}): a prepare "
                             f"since has replaced the split. Grade the stage again (`make grade STAGE={stage.label}`), or "
                             f"give the file as {stage.label}={stage.path} to report it as it stands")
    zips = {s.label: (read_results_meta(s.path) or {}).get("zip_sha256") for s in mine}
    noted = {label: sha for label, sha in zips.items() if sha}
    if len(set(noted.values())) > 1:
        named = ", ".join(f"{label} with {sha[:12]}" for label, sha in noted.items())
        raise InputError(f"the stages were graded with different bundles ({named}): verdicts of two bundles are not "
                         "comparable. Grade every stage with one bundle (`make grade STAGE=...` after `make pack`), or "
                         "give the files as label=path to report them as they stand")


def _check_same_rows(first: Stage, other: Stage) -> None:
    mine = {r.row_id: r for r in first.rows}
    theirs = {r.row_id: r for r in other.rows}
    missing = [i for i in mine if i not in theirs]
    extra = [i for i in theirs if i not in mine]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"{len(missing)} row(s) of {first.label} are missing from {other.label} (first {missing[0]})")
        if extra:
            parts.append(f"{len(extra)} row(s) of {other.label} are not in {first.label} (first {extra[0]})")
        raise InputError(f"{other.path} and {first.path} are not results on the same eval rows: "
                         f"{'; '.join(parts)}. Grade every stage on the same eval split")
    for row_id, row in mine.items():
        twin = theirs[row_id]
        for field in ("gold", "db_id", "question"):
            if getattr(row, field) != getattr(twin, field):
                raise InputError(f"row {row_id} has a different {field} in {first.path} ({first.label}) and "
                                 f"{other.path} ({other.label}): {getattr(row, field)!r} vs "
                                 f"{getattr(twin, field)!r}; the files come from different eval splits")


def correctness(stage: Stage) -> list[bool | None]:
    """Per row: True (score 1), False (score 0) or None (unscored). InputError on partial scores."""
    out: list[bool | None] = []
    for row in stage.rows:
        if row.score is None:
            out.append(None)
        elif row.score in (0, 1):
            out.append(row.score == 1)
        else:
            raise InputError(f"{stage.path}: row {row.row_id} has score {row.score}; the report compares "
                             "execution match, which scores each row 0 or 1")
    return out


def original_correctness(stage: Stage) -> list[bool | None]:
    """Per row, the original database's verdict alone (results written before neighbours: the score)."""
    return [None if r.original_score is None else r.original_score == 1 for r in stage.rows]


def _original_only(stage: Stage, levels: list[str]) -> tuple[OriginalOnly, ...]:
    return tuple(OriginalOnly(r.row_id, r.db_id, levels[i], r.question, r.gold, r.sql, r.decided_on, r.detail)
                 for i, r in enumerate(stage.rows) if r.original_score == 1 and r.score == 0)


def level_of_gold(gold: str) -> str:
    try:
        return difficulty(gold)
    except DifficultyError:
        return UNCLASSIFIED


def _accuracy(flags: list[bool | None]) -> Accuracy:
    scored = [f for f in flags if f is not None]
    return report_stats.accuracy(sum(scored), len(scored))


def _breakdown(title: str, keys: list[str], order: list[str], flags: list[list[bool | None]]) -> Breakdown:
    groups = []
    for key in order:
        members = [i for i, k in enumerate(keys) if k == key]
        if members:
            groups.append((key, tuple(_accuracy([f[i] for i in members]) for f in flags)))
    return Breakdown(title, tuple(groups))


def _compare(base: Stage, cand: Stage, base_ok: list[bool | None], cand_ok: list[bool | None],
             levels: list[str], alpha: float, test: str) -> Comparison:
    both = [i for i in range(len(base_ok)) if base_ok[i] is not None and cand_ok[i] is not None]
    result = report_stats.paired([bool(base_ok[i]) for i in both], [bool(cand_ok[i]) for i in both],
                                 alpha=alpha, test=test)

    def changed(i: int) -> ChangedRow:
        b, c = base.rows[i], cand.rows[i]
        return ChangedRow(b.row_id, b.db_id, levels[i], b.question, b.gold, b.sql, c.sql, b.outcome, c.outcome,
                          edits_between(b.gold, b.sql, c.sql))

    gained = tuple(changed(i) for i in both if cand_ok[i] and not base_ok[i])
    lost = tuple(changed(i) for i in both if base_ok[i] and not cand_ok[i])
    table = tally([(r.row_id, r.edits) for r in gained], [(r.row_id, r.edits) for r in lost])
    return Comparison(cand.label, result, gained, lost, table)


def _reward_trends(labels: list[str], logs: list[tuple[str, RewardCurve]], alpha: float) -> tuple[RewardTrend, ...]:
    by_label: dict[str, RewardCurve] = {}
    for label, curve in logs:
        if label not in labels:
            raise InputError(f"--reward-log {label}={curve.path}: {label!r} is not one of the stages ({', '.join(labels)})")
        if label in by_label:
            raise InputError(f"two reward logs for {label} ({by_label[label].path} and {curve.path}): give one per stage")
        by_label[label] = curve
    trends = []
    for label in (x for x in labels if x in by_label):
        curve = by_label[label]
        try:
            trends.append(RewardTrend(label, curve, fit_trend(curve.steps, curve.rewards, alpha=alpha)))
        except TrendError as exc:
            raise RewardLogError(f"{curve.path} ({curve.source}, {curve.key}): {exc}") from None
    return tuple(trends)


def build_report(stages: list[Stage], baseline: str | None = None, *, alpha: float = 0.05,
                 test: str = "chi2", reward_logs: list[tuple[str, RewardCurve]] | None = None) -> Report:
    """The whole report from stages already checked by ``load_stages``, with each stage's reward log
    (label, curve) read by ``harness.report.reward_log``."""
    labels = [s.label for s in stages]
    baseline = labels[0] if baseline is None else baseline
    if baseline not in labels:
        raise InputError(f"baseline {baseline!r} is not one of the inputs ({', '.join(labels)})")
    try:
        report_stats.check_alpha(alpha)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    flags = [correctness(s) for s in stages]
    for stage, f in zip(stages, flags):
        if all(x is None for x in f):
            raise InputError(f"{stage.path} ({stage.label}): every row is unscored (gold or infrastructure "
                             "errors); fix the bundle and grade again")
    levels = [level_of_gold(r.gold) for r in stages[0].rows]
    dbs = [r.db_id for r in stages[0].rows]
    b = labels.index(baseline)
    comparisons = tuple(_compare(stages[b], s, flags[b], flags[i], levels, alpha, test)
                        for i, s in enumerate(stages) if i != b)
    summaries = tuple(StageSummary(s.label, s.path, _accuracy(f), sum(x is None for x in f),
                                   _accuracy(original_correctness(s)), _original_only(s, levels))
                      for s, f in zip(stages, flags))
    test_suite = any(r.beyond_original for s in stages for r in s.rows)
    disputed = [any(s.rows[i].disputed for s in stages) for i in range(len(stages[0].rows))]
    by_gold = (_breakdown("gold", [DISPUTED if d else UNDISPUTED for d in disputed], [DISPUTED, UNDISPUTED], flags)
               if any(disputed) else None)
    rules = [(s.label, leaderboards.of_stage(s.label, s.rows)) for s in stages]
    return Report(rows=len(stages[0].rows), baseline=baseline, alpha=alpha, test=test, stages=summaries,
                  leaderboards=tuple(r for _, r in rules if r is not None),
                  without_leaderboards=tuple(label for label, r in rules if r is None),
                  sampled=tuple((s.label, f) for s, f in ((s, _sampled(s)) for s in stages) if f is not None),
                  comparisons=comparisons,
                  by_level=_breakdown("difficulty", levels, list(LEVELS) + [UNCLASSIFIED], flags),
                  by_database=_breakdown("database", dbs, sorted(set(dbs)), flags), test_suite=test_suite,
                  by_gold=by_gold, rewards=_reward_trends(labels, reward_logs or [], alpha))
