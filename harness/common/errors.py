"""The harness's exception tree, and the project's one table of exit codes.

Messages name the item and say what to do; each exception type carries its exit code. No number
means two things: the harness's codes are 1-11, the bundle's typed errors 20-27 (they reach a
process's exit status only through a caller of the bundle, and the grader service's error bodies),
and a few fixed ones sit above.

>>> [code for code, _name, _meaning in EXIT_CODES][:4]
[0, 1, 2, 3]
"""

from __future__ import annotations

from harness.common.outcomes import BUNDLE_ERRORS

OK = 0
CHECKS_FAILED = 1
USAGE = 2
UNEXPECTED = 10  # an exception no command expected: a bug of the harness, never "checks failed"
WATCHDOG_EXIT = 70  # a grader-service worker ended by its watchdog (EX_SOFTWARE); gunicorn forks another
INTERRUPTED = 130
BROKEN_PIPE = 141


class HarnessError(Exception):
    """Base class: a clear, expected failure of a harness command."""

    exit_code = 8


class VerificationFailed(HarnessError):
    """Checks ran and found failures: pre-push verification (the same code as crashed emulated calls
    and a failed load test)."""

    exit_code = CHECKS_FAILED


class InputError(HarnessError):
    """Bad input: a missing folder, a malformed row or file, a corrupt database."""

    exit_code = 3


class FetchError(HarnessError):
    """The datasets-server could not be read (after retries) or answered something unreadable."""

    exit_code = 4


class PackError(HarnessError):
    """The bundle cannot be packed into a zip the trainer would accept."""

    exit_code = 5


class DockerUnavailable(HarnessError):
    """No Docker engine is reachable, or the image is missing."""

    exit_code = 6


class SubmitError(HarnessError):
    """A step of the submission (akka-optimize) failed."""

    exit_code = 7


class UnexpectedError(HarnessError):
    """An error no command expected: a bug of the harness, reported with its traceback. Raised again
    on the host when one happened inside the trainer container; never exit 1 ("checks failed")."""

    exit_code = UNEXPECTED


class OutputError(HarnessError):
    """An output cannot be written where it was asked for: a read-only or full folder, a path through
    a file. Commands check their outputs before the work, so nothing is lost to it."""

    exit_code = 9


class PortUnavailable(HarnessError):
    """A port to listen on is taken (or needs root): another service, or an earlier `make serve`, holds it."""

    exit_code = 11


# (code, name, meaning): every exit status a process of this project ends with. A test keeps it
# equal to the exception classes (here and in bundle/contract/errors.py) and to the docs' table.
EXIT_CODES: tuple[tuple[int, str, str], ...] = (
    (OK, "ok", "the command did what it was asked"),
    (CHECKS_FAILED, "VerificationFailed", "checks ran and found failures: pre-push verification, "
                                          "emulated calls that crashed or returned no score, a failed load test"),
    (USAGE, "usage", "a flag or argument the command does not accept (argparse), or a make variable left unset"),
    (InputError.exit_code, "InputError", "bad or missing input: the message names it and the command that makes it"),
    (FetchError.exit_code, "FetchError", "the datasets-server could not be read"),
    (PackError.exit_code, "PackError", "the bundle cannot be packed into a zip the trainer accepts, or a zip given "
                                       "is one it would refuse (corrupt, unsafe entries, over the caps)"),
    (DockerUnavailable.exit_code, "DockerUnavailable", "no Docker engine, base image or image build"),
    (SubmitError.exit_code, "SubmitError", "a step of the submission failed"),
    (HarnessError.exit_code, "HarnessError", "another expected failure of the harness"),
    (OutputError.exit_code, "OutputError", "an output cannot be written (a read-only or full folder, a path "
                                           "through a file): the message names it and what to do"),
    (UnexpectedError.exit_code, "UnexpectedError", "an error no command expected: a bug of the harness; the "
                                                   "traceback says where (please report it)"),
    (PortUnavailable.exit_code, "PortUnavailable", "a port to serve on is already in use, needs root or is not an "
                                                   "address of this machine: the message names it and how to choose "
                                                   "another (`--port`, in Make `SERVE_PORT`)"),
    *((e.exit_code, e.name, f"bundle: {e.meaning}") for e in BUNDLE_ERRORS.values()),
    (WATCHDOG_EXIT, "watchdog", "a grader-service worker stopped by its watchdog (replaced at once)"),
    (INTERRUPTED, "interrupted", "Ctrl-C, SIGTERM or SIGHUP"),
    (BROKEN_PIPE, "broken pipe", "the output was piped into a command that stopped reading"),
)


def error_for_exit_code(code: object) -> type[HarnessError]:
    """The harness exception class whose exit code is ``code`` (HarnessError when none is): how an
    error raised inside the trainer container is raised again on the host."""
    for kind in (VerificationFailed, InputError, FetchError, PackError, DockerUnavailable, SubmitError, OutputError,
                 UnexpectedError, PortUnavailable):
        if kind.exit_code == code:
            return kind
    return HarnessError
