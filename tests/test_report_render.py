"""Rendering the report: terminal table, Markdown, and the self-contained HTML page with its chart."""

from __future__ import annotations

import html.parser
import xml.etree.ElementTree as ET

import pytest

from harness.common.results import RowResult
from harness.report import render as report_render
from harness.report.compare import Stage, build_report

SVG = "{http://www.w3.org/2000/svg}"


def stage(label: str, flags: list[bool], question: str = "How many singers?") -> Stage:
    rows = tuple(RowResult(f"eval-{i:05d}", "concert_singer", f"{question} #{i}", "SELECT count(*) FROM singer",
                           "c", f"SELECT {label}_{i} FROM singer", 1.0 if ok else 0.0,
                           "match" if ok else "mismatch", "d") for i, ok in enumerate(flags))
    return Stage(label, f"{label}.jsonl", rows)


def reference_stages(question: str = "How many singers?") -> list[Stage]:
    """SFT baseline (118 of 300) and GRPO after 4/12/24 steps, as in the reference table."""
    def flags(gained: int, lost: int) -> list[bool]:
        out = [i < 118 for i in range(300)]
        for i in range(lost):
            out[i] = False
        for i in range(gained):
            out[118 + i] = True
        return out
    return [stage("sft", flags(0, 0), question), stage("grpo4", flags(7, 3), question),
            stage("grpo12", flags(17, 6), question), stage("grpo24", flags(26, 8), question)]


@pytest.fixture(scope="module")
def reference_report():
    return build_report(reference_stages(), "sft")


class Collector(html.parser.HTMLParser):
    """Every start tag with its attributes, in document order, and the doctype."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.doctype: str | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_decl(self, decl):
        self.doctype = decl


def test_terminal_table_carries_the_reference_figures(reference_report):
    text = report_render.terminal(reference_report, show_changed=2)
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith(("sft ", "grpo"))}
    assert "baseline" in lines["sft"]
    assert lines["grpo4"].split()[:5] == ["grpo4", "0.407", "[0.353,", "0.463]", "122/300"]
    assert "0.34" in lines["grpo4"] and "inside noise" in lines["grpo4"]
    assert "0.037" in lines["grpo12"] and "significant" in lines["grpo12"]
    assert "0.0036" in lines["grpo24"]
    assert "... 24 more gained" in text and "... 6 more lost" in text


def test_terminal_shows_changed_rows_side_by_side(reference_report):
    text = report_render.terminal(reference_report, show_changed=1)
    block = text[text.index("Changed rows, grpo4 against sft: 7 gained, 3 lost"):].splitlines()
    assert block[1].startswith("  + eval-00118  concert_singer  easy  How many singers? #118")
    assert block[2].split() == ["gold", "SELECT", "count(*)", "FROM", "singer"]
    assert block[3].split()[:2] == ["sft", "SELECT"] and block[3].endswith("[mismatch]")
    assert block[4].split()[:2] == ["grpo4", "SELECT"] and block[4].endswith("[match]")


def test_markdown_escapes_pipes_and_lists_every_changed_row():
    result = build_report(reference_stages(question="a | b"), "sft")
    text = report_render.markdown(result)
    assert "a \\| b #118" in text and "a | b" not in text
    gained = text[text.index("## Changed rows: grpo24 against sft"):]
    gained = gained[gained.index("### Gained (26)"):gained.index("### Lost (8)")]
    assert sum(1 for line in gained.splitlines() if line.startswith("| eval-")) == 26
    header = next(line for line in text.splitlines() if line.startswith("| stage"))
    assert header.count("|") == 11  # ten columns


def test_html_page_opens_and_holds_the_chart(reference_report):
    page = report_render.html_page(reference_report)
    parser = Collector()
    parser.feed(page)
    parser.close()
    assert parser.doctype is not None and parser.doctype.lower() == "doctype html"
    names = [t for t, _ in parser.tags]
    assert names[:2] == ["html", "head"] and "body" in names and "table" in names
    figure = names.index("figure")
    assert dict(parser.tags[figure][1]).get("id") == "chart" and names[figure + 1] == "svg"
    # the chart is a well-formed SVG document with bars and the stage labels as text
    svg = page[page.index("<svg"):page.index("</svg>") + len("</svg>")]
    root = ET.fromstring(svg)
    texts = "".join(t.text or "" for t in root.iter(f"{SVG}text"))
    for label in ("sft", "grpo4", "grpo12", "grpo24", "0.393", "0.453", "p 0.037"):
        assert label in texts
    assert len(list(root.iter(f"{SVG}path"))) > 10


def test_html_page_loads_nothing_from_outside(reference_report):
    page = report_render.html_page(reference_report)
    parser = Collector()
    parser.feed(page)
    assert not {"script", "link", "iframe", "img", "object", "embed"} & {t for t, _ in parser.tags}
    for tag, attrs in parser.tags:
        for name, value in attrs.items():
            if value and "://" in value:
                # only XML namespace names, which are identifiers and never fetched
                assert name.startswith("xmlns"), (tag, name, value)
            if name in ("src", "href", "xlink:href") and value:
                assert value.startswith("#"), (tag, name, value)
    assert "@import" not in page and "url(http" not in page


def test_html_escapes_model_and_dataset_text():
    hostile = [stage("base", [False, True], question="<script>alert(1)</script>"),
               stage("cand", [True, True], question="<script>alert(1)</script>")]
    page = report_render.html_page(build_report(hostile))
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_html_is_deterministic(reference_report):
    assert report_render.html_page(reference_report) == report_render.html_page(reference_report)


def test_breakdown_rows_show_counts_and_n_a_where_a_stage_scored_nothing():
    base = stage("base", [True, False, True])
    cand = stage("cand", [False, True, True])
    # row 2 sits on another database, where the candidate's row was not scored
    moved = RowResult(**{**cand.rows[2].__dict__, "db_id": "pets", "score": None, "outcome": "gold_error"})
    cand = Stage("cand", "cand.jsonl", cand.rows[:2] + (moved,))
    base = Stage("base", "base.jsonl", base.rows[:2] + (RowResult(**{**base.rows[2].__dict__, "db_id": "pets"}),))
    result = build_report([base, cand])
    assert report_render.breakdown_rows(result, result.by_level) == (
        ["difficulty", "rows", "base", "cand"], [["easy", "3", "0.667 (2/3)", "0.500 (1/2)"]])
    assert report_render.breakdown_rows(result, result.by_database)[1] == [
        ["concert_singer", "2", "0.500 (1/2)", "0.500 (1/2)"], ["pets", "1", "1.000 (1/1)", "n/a"]]
    assert "(1 unscored)" in report_render.terminal(result)
