"""`bench-ray`: grading throughput on real Spider dev pairs, the local backend against Ray with 1 and 2 workers.

(Its flags: harness/commands/bench_ray.py.)

    python3 -m harness bench-ray --spider DIR [--pairs 1034] [--json FILE]

Stages a bundle over the dev pairs (as `bench` does), packs it, and grades the same eval rows three
ways in one run, each answer alternately the gold and a wrong query (the gold with ``LIMIT 0``):
the local backend (``grade``), and ``grade --ray auto`` with 1 and with 2 workers. Prints rows a
second while grading, and Ray's fixed costs: starting the local instance (``ray.init``), the pool's
first shard (actor processes started, the zip fetched and unpacked, gold results read), shutting
down. Shards are given out once every worker has started (``RayOptions.all_started``), so that
the run with 2 workers is graded by 2. The results of every run must be equal, or the benchmark fails.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from harness.bench.neighbours import stage_dev_bundle
from harness.common.bundle_loader import load_bundle
from harness.common.errors import VerificationFailed
from harness.common.prompts import chat_row
from harness.common.rows import SplitRow
from harness.emulator.grader_job import grade_split, grader_summary
from harness.prepare import bundle_data, pack
from harness.raygrade.backend import RayOptions, grade_split_ray


def eval_rows(root: Path, kept: list[dict]) -> tuple[list[SplitRow], list[str]]:
    """The staged rows as an eval split (schema in the prompt, as prepare writes it) and their answers."""
    rows, answers = [], []
    for i, r in enumerate(kept):
        schema = bundle_data.schema_lines(root / "data" / "databases" / f"{r['db_id']}.sqlite")
        rows.append(SplitRow(f"eval-{i:05d}", "eval", tuple(chat_row(schema, r["question"], r["query"])["messages"])))
        answers.append(r["query"] if i % 2 == 0 else f"{r['query'].rstrip().rstrip(';')} LIMIT 0")
    return rows, answers


def run(spider: Path, pairs: int) -> dict:
    """Grading figures on ``pairs`` dev pairs: the local backend, then Ray with 1 and with 2 workers."""
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        root = Path(tmp) / "bundle"
        root.mkdir()
        kept = stage_dev_bundle(spider, root, pairs)
        zip_path = Path(tmp) / "spider-scoring.zip"
        pack.pack(root, zip_path)
        rows, answers = eval_rows(root, kept)
        figures: dict = {"rows": len(rows), "zip_bytes": zip_path.stat().st_size, "cpus": os.cpu_count()}
        started = time.perf_counter()
        with load_bundle(zip_path, tmp) as loaded:
            loaded_s = time.perf_counter() - started
            local = grade_split(loaded, rows, answers)
        local_s = time.perf_counter() - started - loaded_s
        figures["local"] = {"load_s": loaded_s, "grade_s": local_s, "rows_per_s": len(rows) / local_s}
        figures["outcomes"] = grader_summary(local)["outcomes"]
        for workers in (1, 2):
            began = time.perf_counter()
            # every worker started before the first shard: the figure for N workers is N workers' work
            results, ray = grade_split_ray(zip_path, rows, answers, options=RayOptions(workers=workers, all_started=True))
            first = -(-len(rows) // ray["shards"])  # rows in a shard (the last may hold fewer)
            steady = ray["grade_s"] - ray["first_shard_s"]
            ray.update(total_s=time.perf_counter() - began, rows_per_s=len(rows) / ray["grade_s"],
                       steady_rows_per_s=(len(rows) - first) / steady if steady > 0 else None)
            figures[f"ray_{workers}"] = ray
            if results != local:
                raise VerificationFailed(f"Ray with {workers} worker(s) gave other results than the local backend")
    return figures


def lines(f: dict) -> list[str]:
    out = [f"{f['rows']} dev rows (half answered with the gold, half wrong), zip {f['zip_bytes'] / 1e6:.1f} MB, "
           f"{f['cpus']} CPUs; outcomes {', '.join(f'{k} {v}' for k, v in sorted(f['outcomes'].items()))}",
           f"local backend: {f['local']['rows_per_s']:,.0f} rows/s ({f['local']['grade_s']:.2f} s grading, "
           f"{f['local']['load_s']:.2f} s loading the zip)"]
    for workers in (1, 2):
        r = f[f"ray_{workers}"]
        steady = "-" if r["steady_rows_per_s"] is None else f"{r['steady_rows_per_s']:,.0f}"
        out.append(f"ray, {workers} worker(s): {r['rows_per_s']:,.0f} rows/s ({r['grade_s']:.2f} s from the first actor "
                   f"to the last result, {r['first_shard_s']:.2f} s of it to the first shard; {steady} rows/s after it); "
                   f"ray.init {r['start_s']:.2f} s, shutdown {r['shutdown_s']:.2f} s; end to end {r['total_s']:.2f} s, "
                   f"{r['shards']} shards")
    one = f["ray_1"]
    out.append(f"Ray's fixed cost here: about {one['start_s'] + one['first_shard_s'] + one['shutdown_s']:.1f} s "
               "(start, first shard, shutdown) before any gain from more workers")
    return out
