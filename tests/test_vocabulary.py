"""The harness's typed vocabularies (harness.common.outcomes) agree with the bundle's own names, the
exit-code table has one meaning per number, and the two message-text readers read alike."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest

from bundle import verify
from bundle.contract import errors as scoring_errors
from bundle.scoring import entry as scoring_entry
from conftest import ROOT
from harness.common import errors
from harness.common.completions import message_text
from harness.common.outcomes import BUNDLE_ERRORS, OUTCOMES, SCORED_OUTCOMES, UNSCORED_OUTCOMES

BUNDLE_CLASSES = [c for _, c in inspect.getmembers(scoring_errors, inspect.isclass)
                  if issubclass(c, scoring_errors.ScoringInfrastructureError)]
HARNESS_CLASSES = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.HarnessError)]


def test_the_outcomes_are_the_bundle_s():
    assert set(SCORED_OUTCOMES) | set(UNSCORED_OUTCOMES) == set(verify.OUTCOMES)
    assert set(UNSCORED_OUTCOMES) == set(verify.UNSCORED)
    assert set(OUTCOMES) - set(verify.OUTCOMES) == {"crash", "bad_return"}  # the emulator's own


@pytest.mark.parametrize("kind", BUNDLE_CLASSES, ids=lambda k: k.__name__)
def test_each_bundle_error_carries_the_code_the_harness_maps(kind):
    known = BUNDLE_ERRORS[kind.code]
    assert (known.name, known.exit_code, known.outcome) == (kind.__name__, kind.exit_code, kind.outcome)


def test_every_code_has_its_class_and_codes_are_distinct():
    assert sorted(k.code for k in BUNDLE_CLASSES) == sorted(BUNDLE_ERRORS)


def test_no_exit_code_means_two_things():
    numbers = [code for code, _name, _meaning in errors.EXIT_CODES]
    assert len(numbers) == len(set(numbers))
    table = {name: code for code, name, _meaning in errors.EXIT_CODES}
    for kind in HARNESS_CLASSES + BUNDLE_CLASSES:
        assert table[kind.__name__] == kind.exit_code, kind
    assert errors.error_for_exit_code(errors.PackError.exit_code) is errors.PackError
    assert errors.error_for_exit_code(99) is errors.HarnessError


def test_an_unexpected_error_is_a_bug_with_its_own_exit_code_never_checks_failed():
    # A command registered beside the others (tests/broken_command.py) raises what no check expects.
    # Before, Python's own exit 1 said "checks ran and found failures" (VerificationFailed).
    run = ("import sys; from harness import cli; cli.COMMANDS['broken'] = ('broken_command', 'a bug'); "
           "sys.exit(cli.main(['broken']))")
    done = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])})
    assert done.returncode == errors.UnexpectedError.exit_code != errors.VerificationFailed.exit_code
    assert "RuntimeError: a bug in a command" in done.stderr  # the traceback, to report
    assert "error: unexpected RuntimeError in `broken`" in done.stderr and "please report it" in done.stderr


def test_an_unexpected_error_in_the_trainer_container_comes_back_as_one():
    # The emulator's entry point (what the container runs) with a job that fails as a bug would: its
    # document names the class the host raises again, with the same exit code. Before, no document:
    # the host said "the trainer container gave no result" (DockerUnavailable, 6).
    run = ("import sys; from harness.emulator import main as m\n"
           "def job(args, say): raise KeyError('a bug in a job')\n"
           "m.run_job = job; sys.exit(m.main(['grader', '--zip', 'z', '--data', 'd', '--completions', 'c']))")
    done = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, cwd=ROOT, timeout=60)
    document = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == document["exit_code"] == errors.UnexpectedError.exit_code
    assert errors.error_for_exit_code(document["exit_code"]) is errors.UnexpectedError
    assert document["error_type"] == "UnexpectedError" and "a bug in a job" in document["error"]
    assert "KeyError" in done.stderr  # the traceback, shown as the container's progress


@pytest.mark.parametrize("value", [
    "SELECT 1",
    {"role": "assistant", "content": "SELECT 2"},
    [{"role": "user", "content": "q"}, {"role": "assistant", "content": "SELECT 3"}],
    [{"role": "user", "content": "only a question"}],
    [],
    None,
    42,
    [{"role": "assistant", "content": [{"type": "text", "text": "SELECT"}, {"type": "image"}, {"type": "text", "text": "4"}]}],
    [{"type": "text", "text": "SELECT 5"}],
    {"role": "assistant", "content": [{"type": "image"}]},
], ids=["text", "a message", "chat messages", "no assistant message", "empty list", "none", "a number",
        "content as parts", "a list of parts", "parts without text"])
def test_the_harness_reads_a_completion_as_the_bundle_does(value):
    assert message_text(value) == scoring_entry.message_text(value)


def test_both_readers_refuse_a_completion_nested_beyond_reason():
    deep: object = "SELECT 1"
    for _ in range(9):
        deep = [deep]
    with pytest.raises(errors.InputError, match="nested more than 8"):
        message_text(deep)
    with pytest.raises(scoring_errors.CallArgumentsError, match="nested more than 8"):
        scoring_entry.message_text(deep)
    assert message_text(deep[0]) == scoring_entry.message_text(deep[0]) == "SELECT 1"  # type: ignore[index]
