"""The harness's typed vocabularies (harness.common.outcomes) agree with the bundle's own names, the
exit-code table has one meaning per number, and the two message-text readers read alike."""

from __future__ import annotations

import inspect

import pytest

from bundle import scoring_entry, scoring_errors, verify
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
