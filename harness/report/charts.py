"""The report's charts, drawn by matplotlib (figure API, no GUI backend, no pyplot state) as inline SVG.

* :func:`accuracy_figure`: accuracy per stage with 95% interval error bars, and rows gained and lost
  per candidate with the paired p;
* :func:`reward_figure`: each reward log's mean reward per step, its least-squares line and the band
  of one residual standard deviation around it, titled with the trend's verdict.

:func:`figure_svg` writes a figure as an ``<svg>`` element that names no URL and is the same bytes for
the same figure.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

from harness.report.stats import format_p

if TYPE_CHECKING:  # matplotlib itself is imported only when a chart is drawn
    from matplotlib.figure import Figure

    from harness.report.compare import Report, RewardTrend


def accuracy_figure(report: Report) -> Figure:
    """Accuracy per stage (95% intervals), gained and lost bars."""
    from matplotlib.figure import Figure

    stages, comps = report.stages, report.comparisons
    fig = Figure(figsize=(10, 4), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[max(len(stages), 2), max(len(comps), 2)])
    values = [s.accuracy.value if s.accuracy.n else 0.0 for s in stages]
    errors = [[v - s.accuracy.low for v, s in zip(values, stages)],
              [s.accuracy.high - v for v, s in zip(values, stages)]]
    x = list(range(len(stages)))
    left.bar(x, values, yerr=errors, capsize=6,
             color=["#8c8c8c" if s.label == report.baseline else "#4c72b0" for s in stages])
    left.set_xticks(x, [s.label for s in stages])
    left.set_ylim(0, 1)
    left.set_ylabel("execution accuracy")
    left.set_title("Accuracy per stage (95% interval; grey: baseline)")
    for i, v in enumerate(values):
        left.annotate(f"{v:.3f}", (i, v), textcoords="offset points", xytext=(8, 3), fontsize=9)
    xs = list(range(len(comps)))
    right.bar([i - 0.2 for i in xs], [c.paired.gained for c in comps], width=0.4, color="#55a868", label="gained")
    right.bar([i + 0.2 for i in xs], [c.paired.lost for c in comps], width=0.4, color="#c44e52", label="lost")
    right.set_xticks(xs, [f"{c.label}\np {format_p(c.paired.p_value)}" for c in comps])
    right.set_ylabel("rows")
    right.set_title(f"Rows gained and lost against {report.baseline}")
    right.legend()
    return fig


def reward_figure(trends: tuple[RewardTrend, ...]) -> Figure:
    """One panel per reward log: the points, the fitted line, the line ± one residual SD."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(5 * len(trends), 8), 4.2), layout="constrained")
    axes = fig.subplots(1, len(trends), squeeze=False)[0]
    for ax, item in zip(axes, trends):
        steps, trend = item.curve.steps, item.trend
        ends = [trend.first_step, trend.last_step]
        line = [trend.fitted(x) for x in ends]
        ax.plot(steps, item.curve.rewards, color="#4c72b0", linewidth=0.8, marker="o", markersize=2.5,
                label="logged steps")
        ax.fill_between(ends, [y - trend.residual_sd for y in line], [y + trend.residual_sd for y in line],
                        color="#dd8452", alpha=0.2, label="line ± residual SD")
        ax.plot(ends, line, color="#dd8452", linewidth=2, label="least-squares line")
        ax.set_xlabel("step")
        ax.set_ylabel(item.curve.key)
        ax.set_title(f"{item.label}: {trend.verdict}\n(rise {trend.rise:+.3f} over the run, residual SD "
                     f"{trend.residual_sd:.3f})", fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=3, frameon=False)
    return fig


def figure_svg(fig: Figure) -> str:
    """``fig`` as an inline ``<svg>`` element (no XML prologue, no metadata, no external reference)."""
    import matplotlib

    # fixed ids and text kept as text: the same figure gives the same bytes, and labels stay searchable
    with matplotlib.rc_context({"svg.hashsalt": "spider-scoring", "svg.fonttype": "none"}):
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML declaration and DOCTYPE (which names a URL)
    return re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.DOTALL)
