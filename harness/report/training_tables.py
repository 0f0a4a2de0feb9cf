"""The rows of the report's two tables about what training did, shared by the terminal, Markdown and HTML.

* **What the reward promotes** (:func:`edit_rows`): per edit kind and its judgement against the
  gold, the gained and lost rows showing it, with an example of each (harness/report/edits.py).
* **The reward curve beside the evaluation** (:func:`reward_rows`, :func:`reward_sentences`): per
  reward log, its trend against its spread (harness/report/trend.py) beside the stage's held-out
  delta against the baseline.
"""

from __future__ import annotations

from harness.report.compare import Comparison, Report, RewardTrend
from harness.report.edits import Edit, Example, judgement_label
from harness.report.stats import format_p


def _example(example: Example | None, width: int | None) -> str:
    if example is None:
        return ""
    text = f"{example.row_id}: {' '.join(example.detail.split())}"
    return text if width is None or len(text) <= width else text[:width - 3] + "..."


def edit_rows(comp: Comparison, *, width: int | None = None) -> tuple[list[str], list[list[str]]]:
    """Headers and one row per (edit, judgement); ``width`` cuts the examples (the terminal's)."""
    headers = ["edit", "against the gold", f"gained rows ({len(comp.gained)})", f"lost rows ({len(comp.lost)})",
               "example among gained", "example among lost"]
    return headers, [[c.kind, c.label, str(c.gained), str(c.lost), _example(c.gained_example, width),
                      _example(c.lost_example, width)] for c in comp.edit_table]


def edit_title(report: Report, comp: Comparison) -> str:
    return f"What the reward promotes: {comp.label} against {report.baseline}"


def edit_caption(report: Report, comp: Comparison) -> str:
    return (f"The structural edits from {report.baseline}'s SQL to {comp.label}'s on the {len(comp.gained)} gained "
            f"and {len(comp.lost)} lost rows, each judged against the gold; a row may show several.")


def edit_list(edits: tuple[Edit, ...]) -> str:
    """A changed row's edits, one phrase each."""
    return "; ".join(f"{e.kind} ({judgement_label(e.kind, e.judgement)}): {e.detail}" for e in edits)


def _number(x: float) -> str:
    return f"{x:+.3g}"


def _held_out(report: Report, label: str) -> str:
    comp = next((c for c in report.comparisons if c.label == label), None)
    if comp is None:
        return "baseline"
    return f"{comp.paired.delta:+.3f} against {report.baseline} ({comp.paired.verdict}, p {format_p(comp.paired.p_value)})"


def reward_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """Headers and one row per reward log."""
    confidence = f"{round(100 * (1 - report.alpha), 2):g}%"
    headers = ["stage", "reward log", "metric", "steps", f"slope per step [{confidence} interval]", "rise over the run",
               "residual SD", "trend", "held-out delta"]
    rows = []
    for item in report.rewards:
        t, c = item.trend, item.curve
        low, high = t.slope_interval
        skipped = f" ({c.skipped} skipped)" if c.skipped else ""
        rows.append([item.label, f"{c.path} ({c.source})", c.key, f"{t.n}{skipped}, {t.first_step:g}-{t.last_step:g}",
                     f"{_number(t.slope)} [{_number(low)}, {_number(high)}]", f"{t.rise:+.3f}", f"{t.residual_sd:.3f}",
                     t.verdict, _held_out(report, item.label)])
    return headers, rows


def reward_sentence(report: Report, item: RewardTrend) -> str:
    """The verdict in words, as the walkthrough reads a curve beside the evaluation."""
    t = item.trend
    direction = "rises" if t.rise >= 0 else "falls"
    compared = "more" if abs(t.rise) > t.residual_sd else "less"
    interval = "lies above 0" if t.slope_interval[0] > 0 else "lies below 0" if t.slope_interval[1] < 0 else "includes 0"
    wanders = (f"; the curve wanders like a random walk (Dickey-Fuller {t.unit_root_tau:.2f}, not below "
               f"{t.unit_root_critical:.2f}), so its line shows no trend") if t.wanders else ""
    text = (f"{item.label}: over steps {t.first_step:g}-{t.last_step:g} the reward line {direction} by "
            f"{abs(t.rise):.3f}, {compared} than its residual spread {t.residual_sd:.3f} (the slope's interval "
            f"{interval}{wanders}): {t.verdict}. Held-out: {_held_out(report, item.label)}.")
    if t.verdict == "inside its spread":
        text += " The curve does not show the run's effect: judge the run by its held-out evaluation."
    return text

REWARD_HEADING = "The reward curve beside the evaluation: each run's reward trend against its residual spread"
