"""The import contracts of pyproject.toml ([tool.importlinter]) hold, and no module of the harness or the
bundle takes part in an import cycle (docs/architecture.md, "What may import what")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(config: Path | None = None) -> subprocess.CompletedProcess:
    args = [str(LINT_IMPORTS), "--no-cache"] + (["--config", str(config)] if config else [])
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_the_import_contracts_are_kept():
    done = lint_imports()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_broken_contract_fails(tmp_path):
    config = tmp_path / "contracts.toml"
    config.write_text('[tool.importlinter]\nroot_packages = ["harness"]\n\n[[tool.importlinter.contracts]]\n'
                      'name = "commands may not use common (false on purpose)"\ntype = "forbidden"\n'
                      'source_modules = ["harness.commands"]\nforbidden_modules = ["harness.common"]\n')
    done = lint_imports(config)
    assert done.returncode != 0 and "BROKEN" in done.stdout


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted.

    >>> cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}})
    [['a', 'b']]
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle():
    graph = grimp.build_graph("harness", "bundle")
    assert "bundle.sql.verdict" in graph.modules
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert cycles(edges) == []


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
], ids=["a cycle of three", "a chain"])
def test_the_cycle_check_can_fail(edges, expected):
    assert cycles(edges) == expected
