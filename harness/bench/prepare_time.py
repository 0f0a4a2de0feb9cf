"""`bench --only prepare`: how long `make bundle` takes to prepare, cold and warm, at two sizes.

Each build is the command `make bundle` runs, ``python3 -m harness prepare --databases DIR/database
--questions DIR --rows R --rl-rows L --eval-rows E --output OUT``, in a fresh process: the seed's
first-try sizes (200, 100, 50) and the default splits (2000, 600, 300). Cold: into a new output
folder, with a build cache of its own, empty. Warm: the same command again into that folder at once,
with that cache (its neighbour databases reused, docs/preparing.md), as a second `make bundle` would. Wall and CPU seconds
(the process's user and system time) are both given: on a shared machine the wall time counts the
other jobs too.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness.common.errors import HarnessError

ROOT = Path(__file__).resolve().parents[2]
SIZES = {"first try": (200, 100, 50), "default splits": (2000, 600, 300)}


def command(spider: Path, sizes: tuple[int, int, int], output: Path, cache: Path) -> list[str]:
    rows, rl_rows, eval_rows = sizes
    return [sys.executable, "-m", "harness", "prepare", "--databases", str(spider / "database"), "--questions",
            str(spider), "--rows", str(rows), "--rl-rows", str(rl_rows), "--eval-rows", str(eval_rows),
            "--output", str(output), "--build-cache", str(cache)]


def timed(argv: list[str]) -> dict:
    """Wall and CPU seconds of one run of ``argv``; HarnessError with the end of its output when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise HarnessError(f"prepare failed (exit {done.returncode}) while benchmarking: {done.stderr[-800:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu}


def run(spider: Path, work: Path, say: Callable[[str], None] = lambda line: None) -> dict:
    figures: dict = {}
    for name, sizes in SIZES.items():
        output = work / f"prepare-{'-'.join(map(str, sizes))}"
        figures[name] = {"sizes": sizes}
        for state in ("cold", "warm"):
            say(f"  prepare: {name} {sizes}, {state} ...")
            figures[name][state] = timed(command(spider, sizes, output, output.with_name(output.name + "-cache")))
    return figures


def print_figures(f: dict) -> None:
    print("prepare             make bundle's prepare in a fresh process; wall (CPU) seconds")
    for name, x in f.items():
        rows, rl_rows, eval_rows = x["sizes"]
        print(f"  {name:<15} ROWS={rows} RL_ROWS={rl_rows} EVAL_ROWS={eval_rows}: cold {x['cold']['wall_s']:.0f} s "
              f"({x['cold']['cpu_s']:.0f} s CPU), warm {x['warm']['wall_s']:.0f} s ({x['warm']['cpu_s']:.0f} s CPU)")
