"""README.md documents every make target, CLI command and option, setting, limit and outcome
(datasette's tests/test_docs.py idea): adding one without documenting it fails here."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from bundle import scoring_limits, verify
from harness import cli, cli_reference

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")


def make_targets() -> list[str]:
    return re.findall(r"^([a-z][a-z0-9-]*):.*?## ", MAKEFILE, flags=re.M)


def make_variables() -> list[str]:
    return re.findall(r"^([A-Z][A-Z0-9_]*) \?=", MAKEFILE, flags=re.M)


def command_options() -> list[tuple[str, str]]:
    out = []
    for name, (module_name, _help) in cli.COMMANDS.items():
        parser = argparse.ArgumentParser()
        importlib.import_module(module_name).add_arguments(parser)
        for action in parser._actions:
            out += [(name, opt) for opt in action.option_strings if opt.startswith("--") and opt != "--help"]
    return out


def test_there_is_something_to_check():
    assert len(make_targets()) >= 15 and len(cli.COMMANDS) >= 10 and len(command_options()) >= 40


@pytest.mark.parametrize("target", make_targets())
def test_make_target_in_the_targets_table(target):
    assert re.search(rf"^\| `make {re.escape(target)}` \|", README, flags=re.M), f"make {target} is not in README"


@pytest.mark.parametrize("variable", make_variables())
def test_make_variable_documented(variable):
    assert re.search(rf"\b{variable}\b", README), f"Makefile variable {variable} is not in README"


def test_command_line_reference_is_current():
    block = cli_reference.current_block(README)
    assert block is not None, "README lacks the command-line reference block"
    assert block == cli_reference.render(), "README's command-line reference is stale: run `make docs`"


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_cli_command_documented(command):
    assert f"#### `python3 -m harness {command}`" in README, f"CLI command {command!r} is not in README"


@pytest.mark.parametrize("command, option", command_options())
def test_cli_option_documented(command, option):
    section = README.split(f"#### `python3 -m harness {command}`", 1)[-1].split("####", 1)[0]
    assert f"`{option}`" in section, f"{command} {option} is not in README"


@pytest.mark.parametrize("setting", scoring_limits.SETTINGS, ids=lambda s: s.name)
def test_limit_in_the_limits_table(setting):
    row = re.search(rf"^\| `{setting.name}` \| ([^|]+) \| ([^|]+) \|", README, flags=re.M)
    assert row, f"limit {setting.name} is not in README's limits table"
    given = row.group(1).strip()
    assert (given == setting.default) if setting.choices else float(given) == float(setting.default), \
        f"README gives {setting.name} = {given}, code {setting.default}"
    assert row.group(2).strip() == setting.unit, f"README gives {setting.name} in {row.group(2)}, code {setting.unit}"


@pytest.mark.parametrize("outcome", verify.OUTCOMES)
def test_outcome_in_the_outcomes_table(outcome):
    assert re.search(rf"^\| `{outcome}` \|", README, flags=re.M), f"outcome {outcome} is not in README"


def test_the_two_setup_commands_are_first():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "make demo" in quick and "make test" in quick


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
