"""The README (the door) and docs/ (the reference) document every make target and variable, CLI
command and option, setting, limit, outcome, bundle error and exit code (datasette's
tests/test_docs.py idea): adding one without documenting it fails here. The site builds strictly."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import verify
from bundle.contract import limits as scoring_limits
from harness import cli
from harness.commands import docs
from harness.common.outcomes import BUNDLE_ERRORS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
DOCS = {p.relative_to(ROOT / "docs").as_posix(): p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md")}
BUNDLE_PAGE = DOCS["bundle.md"]


def make_targets() -> list[str]:
    return re.findall(r"^([a-z][a-z0-9-]*):.*?## ", MAKEFILE, flags=re.M)


def make_variables() -> list[str]:
    return re.findall(r"^([A-Z][A-Z0-9_]*) \?=", MAKEFILE, flags=re.M)


def command_options() -> list[tuple[str, argparse.Action]]:
    out = []
    for name, (module_name, _help) in cli.COMMANDS.items():
        parser = argparse.ArgumentParser()
        importlib.import_module(module_name).add_arguments(parser)
        out += [(name, action) for action in parser._actions if not isinstance(action, argparse._HelpAction)]
    return out


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_there_is_something_to_check():
    assert len(make_targets()) >= 15 and len(cli.COMMANDS) >= 10 and len(command_options()) >= 40


# -- the README: a door --------------------------------------------------------------------------
def test_the_readme_is_short_and_its_links_resolve():
    assert len(README.splitlines()) <= 250
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", README):
        assert (ROOT / target).is_file(), target


def test_the_two_setup_commands_are_first():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "make demo" in quick and "make test" in quick


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("target", make_targets())
def test_make_target_in_the_targets_table(target):
    assert re.search(rf"^\| `make {re.escape(target)}` \|", README, flags=re.M), f"make {target} is not in README"


@pytest.mark.parametrize("variable", make_variables())
def test_make_variable_documented(variable):
    assert re.search(rf"\b{variable}\b", README + "".join(DOCS.values())), f"Makefile variable {variable} is undocumented"


# -- the Makefile's variables follow each other and fit a user's machine --------------------------
def test_make_help_prints_no_unexpanded_variable():
    done = make("help", "OUT=elsewhere")
    assert done.returncode == 0 and "elsewhere/spider-scoring.zip" in done.stdout
    assert "$(" not in done.stdout


def test_the_zip_follows_out():
    done = make("-n", "-o", "somewhere/prepare-summary.json", "pack", "OUT=somewhere")  # as if prepared
    assert "somewhere/spider-scoring.zip" in done.stdout and "dist/" not in done.stdout


def test_no_default_points_into_this_development_setup():
    assert "../shared" not in MAKEFILE
    assert re.search(r"^BASE_IMAGE \?= python:3\.11-slim$", MAKEFILE, flags=re.M)
    done = make("bundle", "OUT=/nonexistent/out", "SPIDER_DATABASES=")
    assert done.returncode != 0 and "SPIDER_DATABASES=" in done.stderr and "yale-lily.github.io/spider" in done.stderr


# -- what a newcomer met on a fresh clone ---------------------------------------------------------------
def scratch_make(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """`make` on this Makefile in ``folder``, as in a fresh clone there with `make setup` done (the
    sources and .venv are this checkout's, its pyproject older than the venv): whatever a target
    creates lands in ``folder``."""
    shutil.copyfile(ROOT / "Makefile", folder / "Makefile")
    (folder / "pyproject.toml").write_text("")
    os.utime(folder / "pyproject.toml", (0, 0))
    for name in SCRATCH_LINKS:
        (folder / name).symlink_to(ROOT / name)
    return subprocess.run(["make", "--no-print-directory", *args], capture_output=True, text=True, cwd=folder, timeout=120)


SCRATCH_LINKS = (".venv", "bundle", "harness", "fixtures", "docker")


def made(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in ("Makefile", "pyproject.toml", *SCRATCH_LINKS))


@pytest.mark.parametrize("variable, value", [
    ("OUT", "my out"), ("ZIP", "my out/b.zip"), ("SPIDER_DATABASES", "My Data/spider/database"), ("OUT", ""),
], ids=["OUT with a space", "ZIP with a space", "SPIDER_DATABASES with a space", "OUT empty"])
def test_a_path_make_cannot_use_is_refused_before_anything_runs(tmp_path, variable, value):
    done = scratch_make(tmp_path, "sample-bundle", f"{variable}={value}")
    assert done.returncode == 2
    assert (f'{variable}="{value}": make cannot use a path with a space' if value else f"{variable} is empty") in done.stderr
    assert made(tmp_path) == []  # before: ./my and ./out (in the project root), and a recipe that failed


@pytest.mark.parametrize("goal", ["pack", "pipeline", "grade STAGE=sft", "verify"])
def test_a_dry_run_on_a_new_folder_runs_nothing_and_shows_the_steps(tmp_path, goal):
    done = scratch_make(tmp_path, "-n", *goal.split(), "OUT=new")
    assert done.returncode == 0, done.stderr  # before: the "nothing is prepared" recipe ran, exit 2
    assert "nothing is prepared in new yet" in done.stdout  # printed as the step it would run
    assert made(tmp_path) == []  # before, `make -n pipeline` wrote new/pipeline-args


# -- docs/: the reference --------------------------------------------------------------------------
@pytest.mark.parametrize("page, make_page", [(p.relative_to(ROOT / "docs").as_posix(), m) for p, m in docs.PAGES.items()])
def test_the_generated_reference_is_current(page, make_page):
    assert DOCS[page] == make_page(), f"docs/{page} is stale: run `make docs`"


@pytest.mark.parametrize("command, action", command_options(), ids=lambda v: getattr(v, "dest", v))
def test_every_cli_option_has_help(command, action):
    assert action.help, f"{command} {action.option_strings or action.dest} has no help text"


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_cli_command_in_the_reference(command):
    assert f"## `{command}`" in DOCS["reference/cli.md"]


@pytest.mark.parametrize("setting", scoring_limits.SETTINGS, ids=lambda s: s.name)
def test_limit_in_the_limits_table(setting):
    row = re.search(rf"^\| `{setting.name}` \| ([^|]+) \| ([^|]+) \|", BUNDLE_PAGE, flags=re.M)
    assert row, f"limit {setting.name} is not in docs/bundle.md's limits table"
    given = row.group(1).strip()
    same = given == str(setting.default) if isinstance(setting.default, str) else float(given) == float(setting.default)
    assert same, f"docs/bundle.md gives {setting.name} = {given}, code {setting.default}"
    assert row.group(2).strip() == setting.unit, f"docs/bundle.md gives {setting.name} in {row.group(2)}, code {setting.unit}"


@pytest.mark.parametrize("outcome", verify.OUTCOMES)
def test_outcome_in_the_outcomes_table(outcome):
    assert re.search(rf"^\| `{outcome}` \|", BUNDLE_PAGE, flags=re.M), f"outcome {outcome} is not in docs/bundle.md"


@pytest.mark.parametrize("code", [c for c in BUNDLE_ERRORS if c != "scoring_infrastructure"])
def test_bundle_error_in_the_errors_table(code):
    known = BUNDLE_ERRORS[code]
    assert f"| `{known.name}` | `{code}` | {known.exit_code} |" in BUNDLE_PAGE


def test_the_docs_site_builds_strictly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "architecture" / "index.html").is_file()


def test_a_broken_link_fails_the_strict_build(tmp_path):
    site = tmp_path / "project"
    (site / "docs").mkdir(parents=True)
    (site / "docs" / "index.md").write_text("# x\n\n[nowhere](missing.md)\n")
    (site / "mkdocs.yml").write_text("site_name: x\nstrict: true\n")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict"], capture_output=True,
                          text=True, cwd=site, timeout=120)
    assert done.returncode != 0 and "missing.md" in done.stdout + done.stderr
