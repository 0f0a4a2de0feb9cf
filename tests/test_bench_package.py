"""The benchmarks' package (harness/bench/): every module imports, and the bench commands stay thin
flag-to-call layers over it."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import harness.bench

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ("bench", "bench_overturns", "bench_ray")
FAMILIES = {"budget", "calls", "cost", "groups", "hardening", "labels", "neighbours", "on_ray", "overturns", "search",
            "suite"}


def test_every_module_of_the_bench_package_imports():
    names = {m.name for m in pkgutil.iter_modules(harness.bench.__path__)}
    assert names >= FAMILIES
    for name in sorted(names):
        module = importlib.import_module(f"harness.bench.{name}")
        assert module.__doc__, f"harness.bench.{name} has no docstring"


def test_no_bench_module_is_left_among_the_commands_but_the_commands():
    left = {p.stem for p in (ROOT / "harness" / "commands").glob("bench*.py")}
    assert left == set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_bench_command_only_reads_flags_and_calls(name):
    path = ROOT / "harness" / "commands" / f"{name}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert functions == ["add_arguments", "run"]
    assert len(path.read_text(encoding="utf-8").splitlines()) < 80


@pytest.mark.parametrize("command", ["bench", "bench-overturns", "bench-ray"])
def test_a_bench_command_shows_its_help(command):
    done = subprocess.run([sys.executable, "-m", "harness", command, "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--spider DIR" in done.stdout


def test_bench_only_refuses_a_family_it_does_not_know(tmp_path):
    from harness.bench import suite
    from harness.common.errors import InputError
    with pytest.raises(InputError, match="--only lables: no such family of figures; the families are calls"):
        suite.chosen(["labels", "lables"])
    assert {"labels", "neighbours"} <= {f.name for f in suite.FAMILIES}
