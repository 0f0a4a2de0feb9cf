"""The harness's exception tree. Messages name the item and say what to do; exit codes on types."""

from __future__ import annotations


class HarnessError(Exception):
    """Base class: a clear, expected failure of a harness command."""

    exit_code = 2


class InputError(HarnessError):
    """Bad input: a missing folder, a malformed row or file, a corrupt database."""

    exit_code = 3


class FetchError(HarnessError):
    """The datasets-server could not be read (after retries) or answered something unreadable."""

    exit_code = 4


class PackError(HarnessError):
    """The bundle cannot be packed into a zip the trainer would accept."""

    exit_code = 5


class VerificationFailed(HarnessError):
    """Pre-push verification found a failing check."""

    exit_code = 6


class DockerUnavailable(HarnessError):
    """No Docker engine is reachable, or the image is missing."""

    exit_code = 7


class SubmitError(HarnessError):
    """A step of the submission (akka-optimize) failed."""

    exit_code = 8
