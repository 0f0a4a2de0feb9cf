"""The report's sections on what training changed: the edit table (what the reward promotes) and the
reward curve beside the evaluation, in the terminal, Markdown and HTML, through the command and the demo."""

from __future__ import annotations

import html.parser
import json
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.cli import main
from harness.common.errors import InputError
from harness.common.results import RowResult, write_results
from harness.report import render
from harness.report.compare import Stage, build_report

ROOT = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"

# (gold, SFT's SQL, GRPO's SQL, SFT right, GRPO right): SFT adds joins and aliases the questions do not
# need, GRPO drops them; once it drops a join the question needs (Spider dev golds)
ROWS = [
    ("SELECT count(*) FROM singer",
     "SELECT count(*) FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.singer_id",
     "SELECT count(*) FROM singer", False, True),
    ("SELECT count(*) FROM pets WHERE weight > 10",
     "SELECT count(*) FROM pets AS T1 JOIN has_pet AS T2 ON T1.petid = T2.petid WHERE T1.weight > 10",
     "SELECT count(*) FROM pets WHERE weight > 10", False, True),
    ("SELECT DISTINCT country FROM singer WHERE age > 20",
     "SELECT country FROM singer WHERE age > 20", "SELECT DISTINCT country FROM singer WHERE age > 20", False, True),
    ("SELECT count(*) FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid WHERE T1.age > 20",
     "SELECT count(*) FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid WHERE T1.age > 20",
     "SELECT count(*) FROM student WHERE age > 20", True, False),
    ("SELECT name FROM singer", "SELECT name FROM singer", "SELECT name FROM singer", True, True),
]


def stage(label: str, column: int) -> Stage:
    rows = tuple(RowResult(f"eval-{i:05d}", "concert_singer", f"question {i}", row[0], "c", row[column],
                           1.0 if row[column + 2] else 0.0, "match" if row[column + 2] else "mismatch", "d")
                 for i, row in enumerate(ROWS))
    return Stage(label, f"{label}.jsonl", rows)


def reward_log(tmp_path: Path, rewards: list[float]) -> Path:
    path = tmp_path / "rl-rewards.csv"
    path.write_text("step,reward\n" + "".join(f"{i + 1},{r}\n" for i, r in enumerate(rewards)))
    return path


def read_reward_log(path: Path):
    from harness.report.reward_log import read_reward_log as read  # imported here: the edit tests need none of it

    return read(path)


FLAT = [0.31, 0.36, 0.29, 0.35, 0.33, 0.30, 0.37, 0.32]


@pytest.fixture
def report():
    return build_report([stage("sft", 1), stage("rl", 2)], "sft")


@pytest.fixture
def with_rewards(tmp_path):
    return build_report([stage("sft", 1), stage("rl", 2)], "sft",
                        reward_logs=[("rl", read_reward_log(reward_log(tmp_path, FLAT)))])


class Tables(html.parser.HTMLParser):
    """The text of every h2, and every table as rows of cell texts, with the h2 it follows."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.figures: list[str] = []
        self._text: list[str] | None = None
        self._rows: list[list[str]] | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("h2", "td", "th"):
            self._text = []
        elif tag == "table":
            self._rows = self.tables.setdefault(self.headings[-1] if self.headings else "", [])
        elif tag == "tr" and self._rows is not None:
            self._rows.append([])
        elif tag == "figure":
            self.figures.append(dict(attrs).get("id") or "")

    def handle_endtag(self, tag):
        if tag == "h2" and self._text is not None:
            self.headings.append("".join(self._text))
        elif tag in ("td", "th") and self._text is not None and self._rows is not None:
            self._rows[-1].append("".join(self._text))
        elif tag == "table":
            self._rows = None
        if tag in ("h2", "td", "th"):
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def parse(page: str) -> Tables:
    parser = Tables()
    parser.feed(page)
    parser.close()
    return parser


EXPECTED_EDITS = [  # edit, against the gold, gained, lost, example among gained, example among lost
    ["join dropped", "not needed", "2", "0", "eval-00000: - JOIN singer_in_concert", ""],
    ["join dropped", "needed", "0", "1", "", "eval-00003: - JOIN has_pet"],
    ["aliases dropped", "closer to the gold", "2", "0", "eval-00000: - aliases singer, singer_in_concert", ""],
    ["aliases dropped", "further from the gold", "0", "1", "", "eval-00003: - aliases has_pet, student"],
    ["DISTINCT added", "closer to the gold", "1", "0", "eval-00002: + DISTINCT", ""],
]


def test_the_markdown_report_holds_the_edit_table(report):
    text = render.markdown(report)
    section = text[text.index("## What the reward promotes: rl against sft"):text.index("## Changed rows: rl against sft")]
    assert "on the 3 gained and 1 lost rows, each judged against the gold" in section
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    assert lines[0] == "| edit | against the gold | gained rows (3) | lost rows (1) | example among gained | example among lost |"
    assert [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[1:]] == EXPECTED_EDITS


def test_the_html_report_holds_the_edit_table_and_each_changed_rows_edits(report):
    page = parse(render.html_page(report))
    table = page.tables["What the reward promotes: rl against sft"]
    assert table[0][:4] == ["edit", "against the gold", "gained rows (3)", "lost rows (1)"]
    assert table[1:] == EXPECTED_EDITS
    changed = page.tables["Changed rows: rl against sft"]
    assert changed[0][-1] == "edits"
    lost = next(row for row in changed if row[0] == "eval-00003")
    assert lost[-1] == ("join dropped (needed): - JOIN has_pet; aliases dropped (further from the gold): "
                        "- aliases has_pet, student")


def test_the_terminal_report_holds_the_edit_table(report):
    text = render.terminal(report)
    lines = text[text.index("What the reward promotes: rl against sft"):].splitlines()
    assert lines[1].split("  ")[0] == "edit" and lines[3].split()[:5] == ["join", "dropped", "not", "needed", "2"]
    assert any(line.startswith("      edits  join dropped (needed): - JOIN has_pet") for line in lines)


def test_a_comparison_without_changed_rows_says_so():
    same = build_report([stage("sft", 1), stage("copy", 1)], "sft")
    assert "No changed rows." in render.markdown(same) and "No changed rows." in render.terminal(same)


def test_the_reward_section_sits_beside_the_held_out_delta(with_rewards):
    text = render.markdown(with_rewards)
    section = text[text.index("## The reward curve beside the evaluation"):text.index("## By difficulty")]
    row = next(line for line in section.splitlines() if line.startswith("| rl |"))
    cells = [c.strip() for c in row.strip("|").split(" | ")]
    assert cells[2:4] == ["reward", "8, 1-8"] and cells[7] == "inside its spread"
    assert cells[8] == "+0.400 against sft (inside noise, p 0.62)"
    assert "the reward line rises by 0.011, less than its residual spread 0.031" in section
    assert "judge the run by its held-out evaluation" in section


def test_the_html_reward_chart_is_an_inline_svg_with_the_verdict(with_rewards):
    page = render.html_page(with_rewards)
    assert parse(page).figures == ["chart", "reward-chart"]
    start = page.index("<svg", page.index('id="reward-chart"'))
    root = ET.fromstring(page[start:page.index("</svg>", start) + len("</svg>")])
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "rl: inside its spread" in texts and "least-squares line" in texts
    assert len(list(root.iter(f"{SVG}path"))) > 10
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', "")
    assert render.html_page(with_rewards) == page  # the same report gives the same bytes


def test_a_rising_curve_is_called_so(tmp_path):
    climbing = [0.1 + 0.05 * i + 0.01 * (-1) ** i for i in range(8)]
    result = build_report([stage("sft", 1), stage("rl", 2)], "sft",
                          reward_logs=[("rl", read_reward_log(reward_log(tmp_path, climbing)))])
    assert result.rewards[0].trend.verdict == "rises beyond its spread"
    assert "rises beyond its spread" in render.terminal(result)
    assert "judge the run by its held-out evaluation" not in render.terminal(result)


def test_no_reward_log_leaves_no_reward_section():
    plain = build_report([stage("sft", 1), stage("rl", 2)], "sft")
    page = render.html_page(plain)
    assert "reward curve" not in render.markdown(plain) and 'id="reward-chart"' not in page


# -- the command -----------------------------------------------------------------------------------------
def write_stages(tmp_path: Path) -> tuple[str, str]:
    paths = []
    for label, column in (("sft", 1), ("rl", 2)):
        path = tmp_path / f"{label}.jsonl"
        write_results(path, list(stage(label, column).rows))
        paths.append(f"{label}={path}")
    return paths[0], paths[1]


def test_the_command_reads_a_reward_log_for_a_stage(tmp_path, capsys):
    sft, rl = write_stages(tmp_path)
    log = reward_log(tmp_path, FLAT)
    code = main(["report", sft, rl, "--reward-log", f"rl={log}", "--markdown", str(tmp_path / "r.md"),
                 "--html", str(tmp_path / "r.html")])
    out = capsys.readouterr().out
    assert code == 0
    assert "The reward curve beside the evaluation" in out and "What the reward promotes: rl against sft" in out
    assert f"| rl | {log} (CSV) | reward |" in (tmp_path / "r.md").read_text()
    assert 'id="reward-chart"' in (tmp_path / "r.html").read_text()


def test_the_command_reads_another_metric_with_reward_key(tmp_path, capsys):
    sft, rl = write_stages(tmp_path)
    log = tmp_path / "run.jsonl"
    log.write_text("".join(json.dumps({"step": i, "data": {"critic/rewards/mean": r, "critic/score/mean": 1.0}}) + "\n"
                           for i, r in enumerate(FLAT)))
    assert main(["report", sft, rl, "--reward-log", str(log), "--reward-key", "critic/rewards/mean"]) == 0
    assert "critic/rewards/mean" in capsys.readouterr().out


@pytest.mark.parametrize(("flag", "message"), [
    ("rl={log_bad}", r"rl-rewards\.csv line 3: the reward is 'x'"),
    ("base={log}", r"'base' is not one of the stages \(sft, rl\)"),
    ("rl={log_short}", r"short\.csv \(CSV, reward\): 2 logged step\(s\): a line and its spread need at least 3"),
], ids=["a malformed log", "a stage that is not compared", "too few steps"])
def test_a_bad_reward_log_stops_the_command_before_anything_is_written(tmp_path, capsys, flag, message):
    import re

    sft, rl = write_stages(tmp_path)
    log = reward_log(tmp_path, FLAT)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rl-rewards.csv").write_text("step,reward\n1,0.3\n2,x\n")
    (tmp_path / "short.csv").write_text("step,reward\n1,0.3\n2,0.4\n")
    value = flag.format(log=log, log_bad=bad / "rl-rewards.csv", log_short=tmp_path / "short.csv")
    code = main(["report", sft, rl, "--reward-log", value, "--markdown", str(tmp_path / "r.md")])
    assert code == InputError.exit_code
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "r.md").exists()


# -- the demo ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_demo_report_shows_the_edit_table_and_the_reward_verdict(tmp_path):
    """Runs the steps `make demo` runs (read from `make -n demo`), then reads its report."""
    demo = tmp_path / "demo"
    steps = subprocess.run(["make", "-n", "demo", f"DEMO={demo}", f"PY={sys.executable}"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    commands = [line for line in steps.replace("\\\n", " ").splitlines() if " -m harness " in line]
    assert any("--reward-log tuned=fixtures/sample/reward-log.jsonl" in c for c in commands)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for command in commands:
        done = subprocess.run(shlex.split(command), cwd=ROOT, capture_output=True, text=True, env=env)
        assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    text = (demo / "report.md").read_text()
    assert "## What the reward promotes: tuned against base" in text
    assert "| join added | needed | 2 | 0 | eval-00006: + JOIN team |  |" in text
    assert "| tuned | fixtures/sample/reward-log.jsonl (JSONL) | reward | 60, 1-60 |" in text
    assert "inside its spread" in text
    page = parse((demo / "report.html").read_text())
    assert "What the reward promotes: tuned against base" in page.tables
    assert page.figures == ["chart", "reward-chart"]
