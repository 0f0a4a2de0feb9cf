"""The bundle is stdlib-only and self-contained: each module imports in a fresh interpreter with only the
bundle's folder on the path, as part of its package, and each entry file at the root also as a standalone
file (style.md #1).
Which subpackage may import which is an import contract (pyproject.toml, tests/test_layout.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.prepare import pack

BUNDLE = Path(__file__).resolve().parent.parent / "bundle"
FILES = pack.python_files(BUNDLE)
MODULES = sorted(f[:-3].replace("/", ".").removesuffix(".__init__") for f in FILES if f != "__init__.py")
ENTRY_FILES = sorted(f[:-3] for f in FILES if "/" not in f and f != "__init__.py")  # loaded by path or as top-level names

CHECK = r"""
import importlib, sys
stdlib = set(sys.stdlib_module_names)
before = set(sys.modules)
mode, name = sys.argv[1], sys.argv[2]
importlib.import_module(name if mode == "standalone" else "bundle_pkg." + name)
local = {"bundle_pkg"} | set(sys.argv[3].split(","))
bad = sorted({m.split(".")[0] for m in set(sys.modules) - before} - stdlib - local)
bad = [m for m in bad if not m.startswith("_spider_scoring_")]  # the private package of an entry file
print(",".join(bad))
"""


def run_isolated(mode: str, module: str, tmp_path: Path) -> str:
    pkg = tmp_path / "bundle_pkg"
    if not pkg.exists():
        pack.stage_modules(pkg, BUNDLE)
    path = str(pkg) if mode == "standalone" else str(tmp_path)
    env = {"PYTHONPATH": path, "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {path!r})\n" + CHECK,
                           mode, module, ",".join(MODULES)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("module", MODULES)
def test_imports_only_the_standard_library(module, tmp_path):
    assert run_isolated("package", module, tmp_path) == ""


@pytest.mark.parametrize("module", ENTRY_FILES)
def test_an_entry_file_imports_as_a_standalone_file(module, tmp_path):
    assert run_isolated("standalone", module, tmp_path) == ""


def test_nothing_imports_the_harness():
    for path in map(BUNDLE.joinpath, FILES):
        text = path.read_text()
        assert "harness" not in [line.split()[1].split(".")[0] for line in text.splitlines()
                                 if line.startswith(("import ", "from "))], path


def test_uses_only_python39_syntax():
    # The trainer may run CPython 3.9: no match statements, no runtime X | Y unions, no 3.10+ stdlib calls.
    import ast
    for path in map(BUNDLE.joinpath, FILES):
        source = path.read_text()
        tree = ast.parse(source, feature_version=(3, 9))
        assert "from __future__ import annotations" in source or path.name == "__init__.py", path
        for node in ast.walk(tree):
            assert not isinstance(node, ast.Match), path
            if isinstance(node, ast.keyword):
                assert node.arg not in {"slots", "kw_only"}, (path, node.arg)
