"""A verdict is a pure function of (completion, row, bundle): the same on a quiet machine and beside
two busy processes (as many as the cores of the 2-core development machine: with the suite's other
workers beside them the machine runs well past its cores and the scorer gets a fraction of one;
four busy processes here took a hundred CPU seconds from the rest of the suite). Every real gold of the default splits,
the heaviest real golds of Spider's train and dev, and the hostile suite are scored twice, in fresh
processes, and compared whole (outcome, score and the VM steps counted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench import budget as bench_budget
from harness.emulator import hostile

pytestmark = [pytest.mark.real_data, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
BUSY = 2
# The hostile suite runs with a smaller step floor than the default (5 million steps, not 50) so
# that its runaways are stopped in a fraction of a second even beside the busy processes; the
# property tested, the same verdict at any load, does not depend on the budget's size.
HOSTILE_LIMITS = {"budget_floor_steps": 5_000_000}


def _score(bundle_root: Path, items: list[dict], work: Path, name: str) -> list:
    items_path, out = work / f"{name}-items.json", work / f"{name}-verdicts.json"
    items_path.write_text(json.dumps(items), encoding="utf-8")
    subprocess.run([sys.executable, str(HERE / "verdict_runner.py"), str(bundle_root), str(items_path), str(out)],
                   check=True, timeout=1800, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return json.loads(out.read_text(encoding="utf-8"))


def _items(prepared_spider: Path, spider_dir: Path, scratch: Path) -> list[dict]:
    index = json.loads((prepared_spider / "bundle" / "data" / "index.json").read_text(encoding="utf-8"))
    golds = sorted({(r["db_id"], r["gold"]) for r in index["rows"]})
    items = [{"completion": gold, "gold": gold, "db_id": db_id} for db_id, gold in golds]
    _figures, steps = bench_budget.calibrate(bench_budget.spider_golds(spider_dir))
    heaviest = sorted(steps, key=lambda s: -s[0])[:10]
    items += [{"completion": gold, "gold": gold, "database": str(db), "is_sql": True} for _s, _d, gold, db in heaviest]
    first = index["rows"][0]
    database = prepared_spider / "bundle" / "data" / index["databases"][first["db_id"]]["file"]
    for case in hostile.load_cases(hostile.first_table(database), str(scratch)):
        items.append({"completion": case.text, "gold": first["gold"], "database": str(database),
                      "is_sql": case.is_sql, "limits": HOSTILE_LIMITS})
    return items


def test_verdicts_are_the_same_beside_busy_processes(prepared_spider, spider_dir, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    items = _items(prepared_spider, spider_dir, scratch)
    bundle_root = prepared_spider / "bundle"
    quiet = _score(bundle_root, items, tmp_path, "quiet")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(BUSY)]
    try:
        loaded = _score(bundle_root, items, tmp_path, "loaded")
    finally:
        for process in busy:
            process.kill()
            process.wait()
    differing = [(item["completion"][:80], a, b) for item, a, b in zip(items, quiet, loaded) if a != b]
    assert not differing, differing[:5]
    golds = [v for item, v in zip(items, quiet) if item["completion"] == item["gold"]]
    assert len(golds) > 1000 and all(v[:2] == ["match", 1.0] for v in golds), [v for v in golds if v[1] != 1.0][:5]
    assert os.listdir(scratch) == []
