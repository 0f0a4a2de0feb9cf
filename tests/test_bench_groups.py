"""The GRPO-batch benchmark (`make bench`, harness.bench.groups) on the sample bundle: it runs,
checks that sharing a group's duplicates changes no score, and prints its figures (which depend on the
machine and are not judged here)."""

from __future__ import annotations

import importlib
import json
import shutil
import sys

from harness.bench import groups as bench_groups


def test_the_group_benchmark_prints_throughput_with_and_without_sharing(sample_bundle, tmp_path, capsys, monkeypatch):
    root = tmp_path / "groups_bench_bundle"
    shutil.copytree(sample_bundle, root)
    monkeypatch.syspath_prepend(str(tmp_path))
    index = json.loads((root / "data" / "index.json").read_text())
    rows = [{"query": r["gold"], "db_id": r["db_id"]} for r in index["rows"][:6]]
    importlib.import_module(f"{root.name}.reward")
    try:
        figures = bench_groups.run(root, rows, repeat=1)
    finally:
        for name in [m for m in sys.modules if m.startswith(root.name)]:
            del sys.modules[name]
    assert figures["calls"] == 3 and set(figures["rates"]) == {"8", "4", "2"}
    assert [figures["rates"][k]["duplicates"] for k in ("8", "4", "2")] == [0.0, 0.5, 0.75]
    assert all(x["completions"] == 48 and x["with_per_s"] > 0 and x["without_per_s"] > 0 for x in figures["rates"].values())
    bench_groups.print_figures(figures)
    out = capsys.readouterr().out
    assert "GRPO batches        3 reward calls of 2 prompts x 8 completions; duplicate rates assumed" in out
    assert "2 distinct a group (75% duplicates)" in out
