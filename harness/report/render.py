"""Render a Report (harness/report.py) as a terminal table, Markdown, or a self-contained HTML page.

The HTML page carries its chart as inline SVG drawn by matplotlib (figure API, no GUI backend,
no pyplot state): accuracy per stage with 95% interval error bars, and rows gained and lost per
candidate with the paired p. It loads nothing: no script, no stylesheet, no font, no URL.
"""

from __future__ import annotations

import html

from harness.report import charts, leaderboards, sampling
from harness.report.compare import Breakdown, ChangedRow, Comparison, OriginalOnly, Report
from harness.report.stats import Accuracy, format_p
from harness.report.training_tables import REWARD_HEADING, edit_caption, edit_list, edit_rows, edit_title, reward_rows, reward_sentence

EXAMPLE_WIDTH = 48  # characters of an edit's example in the terminal (files show it whole)
TEST_NAMES = {"chi2": "McNemar chi-squared with continuity correction", "exact": "exact binomial McNemar"}


# -- shared pieces ---------------------------------------------------------------------------------
def _acc(a: Accuracy) -> str:
    return "n/a" if a.n == 0 else f"{a.value:.3f}"


def _interval(a: Accuracy) -> str:
    return "" if a.n == 0 else f"[{a.low:.3f}, {a.high:.3f}]"


def _heading(report: Report) -> str:
    return (f"Execution accuracy on {report.rows} eval rows; baseline {report.baseline}; "
            f"verdict at alpha {report.alpha:g} on the {TEST_NAMES[report.test]} p")


def summary_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """Headers and one row per stage: accuracy, interval, and the paired comparison.

    With neighbour databases, ``accuracy`` is the test suite's and ``original db`` the original
    database's alone, with the number of rows only the original accepted.
    """
    headers = ["stage", "accuracy", "95% interval", "correct", "gained", "lost", "delta",
               "p (chi2)", "p (exact)", "verdict"]
    if report.test_suite:
        headers[1:4] = ["accuracy (test suite)", "95% interval", "original db", "correct"]
    by_label = {c.label: c for c in report.comparisons}
    rows = []
    for stage in report.stages:
        a = stage.accuracy
        row = [stage.label, _acc(a), _interval(a), f"{a.correct}/{a.n}"]
        if report.test_suite:
            row.insert(3, f"{_acc(stage.original)} (+{len(stage.original_only)} only there)")
        if stage.unscored:
            row[-1] += f" ({stage.unscored} unscored)"
        comp = by_label.get(stage.label)
        if comp is None:
            row += ["baseline", "", "", "", "", ""]
        else:
            p = comp.paired
            row += [str(p.gained), str(p.lost), f"{p.delta:+.3f}", format_p(p.chi2.p_value),
                    format_p(p.p_exact), p.verdict]
        rows.append(row)
    return headers, rows


def breakdown_rows(report: Report, breakdown: Breakdown) -> tuple[list[str], list[list[str]]]:
    headers = [breakdown.title, "rows"] + [s.label for s in report.stages]
    rows = []
    for name, accs in breakdown.groups:
        rows.append([name, str(max(a.n for a in accs))]
                    + [f"{_acc(a)} ({a.correct}/{a.n})" if a.n else "n/a" for a in accs])
    return headers, rows


def _sql(text: str | None) -> str:
    return "(no query)" if text is None else " ".join(text.split())


def _original_only(report: Report) -> list[tuple[str, tuple[OriginalOnly, ...]]]:
    """Per stage, the rows only the original database accepted (empty without neighbours)."""
    return [(s.label, s.original_only) for s in report.stages if report.test_suite]


def _original_only_table(rows: tuple[OriginalOnly, ...]) -> tuple[list[str], list[list[str]]]:
    headers = ["row", "database", "level", "question", "gold", "SQL", "refused on"]
    return headers, [[r.row_id, r.db_id, r.level, r.question, _sql(r.gold), _sql(r.sql), r.detail] for r in rows]


def _changed_lists(comp: Comparison) -> list[tuple[str, tuple[ChangedRow, ...]]]:
    return [("gained", comp.gained), ("lost", comp.lost)]


# -- terminal --------------------------------------------------------------------------------------
def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in [headers] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


LEADERBOARD_HEADING = "Scores comparable with the leaderboards"
SAMPLED_HEADING = "Several completions a row: pass@k and majority@k"


def sampled_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """One row per sampled stage: n, its rows, the first samples' accuracy, then pass@k and majority@k."""
    headers = ["stage", "samples a row", "rows", "first sample", "pass@k", "majority@k"]
    rows = []
    for label, f in report.sampled:
        left = f" ({f.left_out} left out: an unscored sample)" if f.left_out else ""
        rows.append([label, str(f.n), f"{f.rows}{left}", "-" if f.first is None else f"{f.first:.3f}",
                     ", ".join(f"@{k} {v:.3f}" for k, v in f.pass_at),
                     ", ".join(f"@{k} {v:.3f}" for k, v in f.majority_at)])
    return headers, rows


def _other_sections(report: Report, table, show: int | None) -> list[str]:
    """The leaderboards' table with the rows apart (the first ``show`` a stage; None: all), and the
    sampled stages' table, each under its heading (``table`` renders headers and rows)."""
    parts: list[str] = []
    if report.leaderboards:
        parts += ["", LEADERBOARD_HEADING, "", leaderboards.CAPTION, "", table(*leaderboards.table(report.leaderboards))]
        if report.without_leaderboards:
            parts.append(f"Graded before these columns existed (grade them again to have them): "
                         f"{', '.join(report.without_leaderboards)}.")
        for stage in report.leaderboards:
            if stage.apart:
                shown = stage.apart if show is None else stage.apart[:show]
                parts += ["", f"Rows where a rule parts from the bundle, {stage.label}: {len(stage.apart)}", "",
                          table(*leaderboards.apart_table(shown))]
                if len(shown) < len(stage.apart):
                    parts.append(f"... {len(stage.apart) - len(shown)} more (see --markdown or --html)")
    if report.sampled:
        parts += ["", SAMPLED_HEADING, "", sampling.CAPTION, "", table(*sampled_rows(report))]
    return parts


def terminal(report: Report, *, show_changed: int = 5) -> str:
    """The report as plain text: tables, then up to ``show_changed`` changed rows per list."""
    parts = [_heading(report), "", _table(*summary_rows(report))]
    parts += _other_sections(report, _table, show_changed)
    if report.rewards:
        parts += ["", REWARD_HEADING, _table(*reward_rows(report))]
        parts += [reward_sentence(report, item) for item in report.rewards]
    for breakdown in report.breakdowns():
        parts += ["", f"By {breakdown.title}", _table(*breakdown_rows(report, breakdown))]
    for comp in report.comparisons:
        parts += ["", f"{edit_title(report, comp)}. {edit_caption(report, comp)}"]
        parts.append(_table(*edit_rows(comp, width=EXAMPLE_WIDTH)) if comp.edit_table else "No changed rows.")
        parts += _terminal_changed(report, comp, show_changed)
    for label, only in _original_only(report):
        parts += ["", f"Accepted by the original database only, {label}: {len(only)} (a neighbour database "
                      "returned other rows)"]
        for one in only[:show_changed]:
            parts += [f"  {one.row_id}  {one.db_id}  {one.question}", f"      gold  {_sql(one.gold)}",
                      f"      {label}  {_sql(one.sql)}  [{one.detail}]"]
        if len(only) > show_changed:
            parts.append(f"  ... {len(only) - show_changed} more (see --markdown or --html)")
    return "\n".join(parts)


def _terminal_changed(report: Report, comp: Comparison, show_changed: int) -> list[str]:
    """The changed rows side by side, each with its edits."""
    parts = ["", f"Changed rows, {comp.label} against {report.baseline}: "
                 f"{comp.paired.gained} gained, {comp.paired.lost} lost"]
    width = max(len(report.baseline), len(comp.label), 5) + 2
    for kind, rows in _changed_lists(comp):
        sign = "+" if kind == "gained" else "-"
        for row in rows[:show_changed]:
            parts += [f"  {sign} {row.row_id}  {row.db_id}  {row.level}  {row.question}",
                      f"      {'gold':<{width}}{_sql(row.gold)}",
                      f"      {report.baseline:<{width}}{_sql(row.baseline_sql)}  [{row.baseline_outcome}]",
                      f"      {comp.label:<{width}}{_sql(row.candidate_sql)}  [{row.candidate_outcome}]",
                      f"      {'edits':<{width}}{edit_list(row.edits)}"]
        if len(rows) > show_changed:
            parts.append(f"  ... {len(rows) - show_changed} more {kind} (see --markdown or --html)")
    return parts


# -- Markdown --------------------------------------------------------------------------------------
def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("\\", "\\\\").replace("|", "\\|")


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def _changed_table(report: Report, comp: Comparison, rows: tuple[ChangedRow, ...]) -> tuple[list[str], list[list[str]]]:
    headers = ["row", "database", "level", "question", "gold", f"{report.baseline} SQL", f"{comp.label} SQL",
               f"outcome ({report.baseline} -> {comp.label})", "edits"]
    return headers, [[r.row_id, r.db_id, r.level, r.question, _sql(r.gold), _sql(r.baseline_sql),
                      _sql(r.candidate_sql), f"{r.baseline_outcome} -> {r.candidate_outcome}", edit_list(r.edits)]
                     for r in rows]


def markdown(report: Report) -> str:
    """The report as Markdown (GitHub tables), every changed row included."""
    parts = ["# Evaluation report", "", _heading(report) + ".", "", _md_table(*summary_rows(report))]
    parts += [f"## {p}" if p in (LEADERBOARD_HEADING, SAMPLED_HEADING) else p
              for p in _other_sections(report, _md_table, None)]
    if report.rewards:
        parts += ["", f"## {REWARD_HEADING}", "", _md_table(*reward_rows(report)), ""]
        parts += [f"- {_md_cell(reward_sentence(report, item))}" for item in report.rewards]
    for breakdown in report.breakdowns():
        parts += ["", f"## By {breakdown.title}", "", _md_table(*breakdown_rows(report, breakdown))]
    for comp in report.comparisons:
        parts += ["", f"## {edit_title(report, comp)}", "", edit_caption(report, comp), ""]
        parts.append(_md_table(*edit_rows(comp)) if comp.edit_table else "No changed rows.")
        parts += ["", f"## Changed rows: {comp.label} against {report.baseline}"]
        for kind, rows in _changed_lists(comp):
            parts += ["", f"### {kind.capitalize()} ({len(rows)})", ""]
            parts.append(_md_table(*_changed_table(report, comp, rows)) if rows else "None.")
    for label, only in _original_only(report):
        parts += ["", f"## Accepted by the original database only: {label} ({len(only)})", ""]
        parts.append(_md_table(*_original_only_table(only)) if only else "None.")
    return "\n".join(parts) + "\n"


# -- HTML ------------------------------------------------------------------------------------------
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;
vertical-align:top}th{background:#f3f3f3}td.sql{font-family:monospace;white-space:pre-wrap;max-width:32em}
figure{margin:1em 0}"""


def _html_table(headers: list[str], rows: list[list[str]], sql_columns: frozenset[int] = frozenset()) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    cell = ('<td class="sql">{}</td>', "<td>{}</td>")
    body = "".join("<tr>" + "".join(cell[i not in sql_columns].format(html.escape(str(x)))
                                    for i, x in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def chart_svg(report: Report) -> str:
    """The accuracy chart as an inline ``<svg>`` element (no XML prologue, no metadata, no external reference)."""
    return charts.figure_svg(charts.accuracy_figure(report))


def _html_rewards(report: Report) -> list[str]:
    """The reward section: its table, the verdicts in words, the chart of every log."""
    if not report.rewards:
        return []
    sentences = "".join(f"<li>{html.escape(reward_sentence(report, item))}</li>" for item in report.rewards)
    svg = charts.figure_svg(charts.reward_figure(report.rewards))
    return [f"<h2>{html.escape(REWARD_HEADING)}</h2>", _html_table(*reward_rows(report)), f"<ul>{sentences}</ul>",
            f'<figure id="reward-chart">{svg}<figcaption>Mean reward per logged step, its least-squares line, and '
            "the band of one residual standard deviation around the line.</figcaption></figure>"]


def html_page(report: Report) -> str:
    """A self-contained HTML page: the tables, the chart inline, and every changed row."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>Evaluation report</title>", f"<style>{_STYLE}</style></head><body>",
             "<h1>Evaluation report</h1>", f"<p>{html.escape(_heading(report))}.</p>",
             _html_table(*summary_rows(report)),
             f'<figure id="chart">{chart_svg(report)}<figcaption>Execution accuracy per stage with 95% '
             "(Wilson) intervals; rows gained and lost against the baseline, with the paired p."
             "</figcaption></figure>"]
    parts += _html_rewards(report)
    for part in _other_sections(report, _html_table, None):
        if part in (LEADERBOARD_HEADING, SAMPLED_HEADING):
            parts.append(f"<h2>{html.escape(part)}</h2>")
        elif part.startswith("<table>"):
            parts.append(part)
        elif part:
            parts.append(f"<h3>{html.escape(part)}</h3>" if part.startswith("Rows where") else f"<p>{html.escape(part)}</p>")
    for breakdown in report.breakdowns():
        parts += [f"<h2>By {html.escape(breakdown.title)}</h2>", _html_table(*breakdown_rows(report, breakdown))]
    for comp in report.comparisons:
        parts += [f"<h2>{html.escape(edit_title(report, comp))}</h2>", f"<p>{html.escape(edit_caption(report, comp))}</p>",
                  _html_table(*edit_rows(comp)) if comp.edit_table else "<p>No changed rows.</p>"]
        parts.append(f"<h2>Changed rows: {html.escape(comp.label)} against {html.escape(report.baseline)}</h2>")
        for kind, rows in _changed_lists(comp):
            parts.append(f"<h3>{kind.capitalize()} ({len(rows)})</h3>")
            parts.append(_html_table(*_changed_table(report, comp, rows), sql_columns=frozenset({4, 5, 6}))
                         if rows else "<p>None.</p>")
    for label, only in _original_only(report):
        parts.append(f"<h2>Accepted by the original database only: {html.escape(label)} ({len(only)})</h2>")
        parts.append(_html_table(*_original_only_table(only), sql_columns=frozenset({4, 5})) if only else "<p>None.</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
