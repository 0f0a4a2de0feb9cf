"""`grade --workers N` (default: every usable core): the rows graded on worker processes
(harness.emulator.grader_pool), the same bytes written as one process, a failing row named, and an
interrupt that leaves nothing half written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from conftest import golds
from harness.cli import main
from harness.common import cores
from harness.common.bundle_loader import load_bundle
from harness.common.errors import INTERRUPTED, InputError, UnexpectedError
from harness.common.results import read_results
from harness.common.rows import read_split
from harness.emulator import grader_pool

ROOT = Path(__file__).resolve().parent.parent
BASE_COMPLETIONS = ROOT / "fixtures" / "sample" / "completions-eval-base.jsonl"


def edited_zip(source: Path, target: Path, grader_tail: str) -> Path:
    """``source`` with ``grader_tail`` appended to its grader.py."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as out:
        for info in src.infolist():
            body = src.read(info)
            out.writestr(info, body + grader_tail.encode() if info.filename == "grader.py" else body)
    return target


def mixed_completions(data: Path) -> Path:
    """Every kind of answer, one a row: golds, other wordings, wrong rows, a write, prose, non-ASCII."""
    kinds = ["{gold}", "```sql\n{gold}\n```", "SELECT 1", "DROP TABLE Team", "I do not know.", "SELECT 'café ☕'",
             "SELECT nope FROM nowhere", "{gold} LIMIT 0"]
    rows = golds(data / "data" / "eval.jsonl")
    path = data / "completions" / "mixed.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(kinds[i % len(kinds)].replace("{gold}", g.rstrip(";"))) + "\n"
                            for i, g in enumerate(rows)), encoding="utf-8")
    return path


def grade(data: Path, stage: str, *extra: str) -> int:
    return main(["grade", "--data", str(data), "--stage", stage, *extra])


@pytest.mark.parametrize("completions, kinds", [("base", 3), ("mixed", 5)])
def test_two_workers_write_the_same_bytes_as_one(data, completions, kinds, capsys):
    given = BASE_COMPLETIONS if completions == "base" else mixed_completions(data)
    one, two = data / "one.jsonl", data / "two.jsonl"
    assert grade(data, "s", "--completions", str(given), "--workers", "1", "--output", str(one)) == 0
    assert " on " not in capsys.readouterr().out.splitlines()[0]
    assert grade(data, "s", "--completions", str(given), "--workers", "2", "--output", str(two)) == 0
    assert "graded 20 rows on 2 worker processes" in capsys.readouterr().out
    assert one.read_bytes() == two.read_bytes()
    outcomes = {r.outcome for r in read_results(one)}
    assert {"match", "mismatch"} <= outcomes and len(outcomes) >= kinds  # the answers differ in kind


def test_the_workers_are_other_processes_each_loading_the_bundle_once(data, tmp_path):
    # a grader whose explanation names its process and how many times its module was imported there
    tail = ("\n\nimport os as _os\n_LOADS = globals().get('_LOADS', 0) + 1\n_grade = grade\n\n"
            "def grade(**kwargs):\n    info = dict(_grade(**kwargs))\n"
            "    info['explanation'] = f\"pid {_os.getpid()} loads {_LOADS}\"\n    return info\n")
    zip_path = edited_zip(data / "spider-scoring.zip", tmp_path / "pid.zip", tail)
    out = tmp_path / "r.jsonl"
    assert grade(data, "s", "--completions", str(BASE_COMPLETIONS), "--zip", str(zip_path), "--workers", "2",
                 "--output", str(out)) == 0
    details = {r.detail for r in read_results(out)}
    pids = {d.split()[1] for d in details}
    assert len(pids) == 2 and str(os.getpid()) not in pids
    assert {d.split()[3] for d in details} == {"1"}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_error_in_a_worker_names_the_row_and_writes_nothing(data, tmp_path, workers, capsys):
    # an explanation that cannot be turned into text: no call should raise this, so it is a bug, named by row
    tail = ("\n\nclass _Unprintable:\n    def __str__(self):\n        raise RuntimeError('no text here')\n\n"
            "_grade = grade\n\ndef grade(**kwargs):\n    info = dict(_grade(**kwargs))\n"
            "    if kwargs.get('output') == 'BOOM':\n        info['explanation'] = _Unprintable()\n    return info\n")
    zip_path = edited_zip(data / "spider-scoring.zip", tmp_path / "boom.zip", tail)
    answers = [json.dumps("BOOM" if i == 13 else g) for i, g in enumerate(golds(data / "data" / "eval.jsonl"))]
    (tmp_path / "c.jsonl").write_text("\n".join(answers) + "\n")
    out = tmp_path / "r.jsonl"
    out.write_text("results written before\n")
    code = grade(data, "s", "--completions", str(tmp_path / "c.jsonl"), "--zip", str(zip_path), "--workers", workers,
                 "--output", str(out))
    err = capsys.readouterr().err
    assert code == UnexpectedError.exit_code
    assert "grading eval row eval-00013 failed: RuntimeError: no text here" in err
    assert ("in grading worker process" in err) == (workers == "2")
    assert out.read_text() == "results written before\n"


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc to find the worker processes")
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_stops_the_workers_and_leaves_no_output(data, tmp_path, how):
    # a grader slow enough to be interrupted while its workers grade (a second a row)
    tail = "\n\nimport time as _time\n_grade = grade\n\ndef grade(**kwargs):\n    _time.sleep(1)\n    return _grade(**kwargs)\n"
    zip_path = edited_zip(data / "spider-scoring.zip", tmp_path / "slow.zip", tail)
    out = tmp_path / "r.jsonl"
    out.write_text("results written before\n")
    process = subprocess.Popen([sys.executable, "-m", "harness", "grade", "--data", str(data), "--stage", "s",
                                "--completions", str(BASE_COMPLETIONS), "--zip", str(zip_path), "--workers", "2",
                                "--output", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 120  # a guard only: the workers start in well under a second
    while len(workers := children(process.pid)) < 2 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(workers) == 2, process.communicate()
    process.send_signal(how)
    _stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == INTERRUPTED, stderr
    assert out.read_text() == "results written before\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".r.jsonl")] == []
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signal handlers are set in the main thread only")
def test_an_interrupt_as_a_worker_starts_leaves_no_worker_behind(data, monkeypatch):
    # the interrupt lands just after a worker's process started, before the pool has it: the window
    # where a Ctrl-C used to leave a worker running after grade had returned
    started: list[subprocess.Popen] = []

    class InterruptedAsItStarts(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(grader_pool.subprocess, "Popen", InterruptedAsItStarts)
    rows = read_split(data / "data" / "eval.jsonl", "eval")
    try:
        with load_bundle(data / "spider-scoring.zip") as loaded, pytest.raises(KeyboardInterrupt):
            grader_pool.grade_on_workers(loaded, rows, ["SELECT 1"] * len(rows), workers=2)
        assert len(started) == 1
        assert started[0].poll() is not None, "a worker started as the interrupt came is still running"
    finally:
        for process in started:
            process.kill()
            process.wait()


def test_workers_below_one_or_beside_ray_are_refused(data, capsys):
    assert grade(data, "s", "--completions", str(BASE_COMPLETIONS), "--workers", "0") == InputError.exit_code
    assert "--workers 0: give 1 or more" in capsys.readouterr().err
    assert grade(data, "s", "--completions", str(BASE_COMPLETIONS), "--workers", "2", "--ray", "auto") == \
        InputError.exit_code
    assert "--ray-workers" in capsys.readouterr().err


def test_the_default_is_every_usable_core_but_not_more_workers_than_rows_allow():
    assert grader_pool.default_workers(1034, 2) == 2
    assert grader_pool.default_workers(20, 64) == 5 and grader_pool.default_workers(3, 64) == 1
    assert 1 <= cores.usable_cores() <= (os.cpu_count() or 1)
    assert cores.quota_cores("50000 100000") == 1 and cores.quota_cores("max 100000") is None


def test_shards_cover_every_row_once_in_order():
    for rows in (0, 1, 7, 20, 1034):
        for workers in (1, 2, 3, 16):
            spans = grader_pool.shards(rows, workers)
            assert [i for a, b in spans for i in range(a, b)] == list(range(rows))
            assert all(0 < b - a <= grader_pool.MOST_ROWS_A_SHARD for a, b in spans)


def test_a_second_stage_reads_the_search_databases_the_first_kept_with_the_same_results(data, capsys, monkeypatch):
    """`grade` keeps the search's databases in DATA/cache/search: the next stage finds every one of
    them (none written again) and writes the same results; `--search-cache off` keeps nothing. (The
    search aimed at the difference, which decides the sample's wrong answers before the counterexample
    search is reached, is off here.)"""
    monkeypatch.setenv("SPIDER_SCORING_DIFFERENCE", "off")
    folder = data / "cache" / "search"
    first, second, off = data / "first.jsonl", data / "second.jsonl", data / "off.jsonl"
    assert grade(data, "s", "--completions", str(BASE_COMPLETIONS), "--output", str(first)) == 0
    assert f"in {folder}" in capsys.readouterr().out
    kept = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}
    assert any(p.suffix == ".sqlite" for p in kept)
    assert grade(data, "s", "--completions", str(BASE_COMPLETIONS), "--output", str(second)) == 0
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()} == kept
    assert second.read_bytes() == first.read_bytes()
    capsys.readouterr()
    assert grade(data, "s", "--completions", str(BASE_COMPLETIONS), "--output", str(off), "--search-cache", "off") == 0
    assert "search databases kept" not in capsys.readouterr().out
    assert off.read_bytes() == first.read_bytes()
