"""External commands for `submit`: the process runner and the pre-push verification.

Commands run from an argument list (never a shell), with stdin closed, a time limit, and their
output kept for error messages. Kept apart from the submission logic so that logic can be tested
with any ``Runner`` (a function shaped like ``run_process``) and any ``Verifier``.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from harness.common.errors import VerificationFailed


@dataclasses.dataclass(frozen=True)
class Result:
    """What a command did: exit code, standard output, and stdout+stderr for messages."""

    returncode: int
    stdout: str
    output: str


# (argv, timeout in seconds, stream output live) -> Result. Raises FileNotFoundError when the
# program is missing and TimeoutError when the limit passes (the process is killed first).
Runner = Callable[[list[str], float, bool], Result]


def child_env() -> dict[str, str]:
    """The caller's environment (TRAINER_URL and the CLI's settings pass through unchanged), plus
    AKKA_DISABLE_PROMPTS=true: the documented switch that makes the CLI fail instead of waiting
    for an answer nobody will type."""
    env = dict(os.environ)
    env.setdefault("AKKA_DISABLE_PROMPTS", "true")
    return env


def run_process(argv: list[str], timeout_s: float, stream: bool = False) -> Result:
    """Run ``argv`` with stdin closed; with ``stream``, echo its output line by line as it comes."""
    if not stream:
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  errors="replace", timeout=timeout_s, env=child_env(), check=False)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{argv[0]} timed out after {timeout_s:g} s") from None
        return Result(done.returncode, done.stdout, done.stdout + done.stderr)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", env=child_env())
    lines: list[str] = []

    def pump() -> None:
        # A thread, so the main thread can enforce the time limit while output flows.
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            sys.stdout.write("    " + line)
            sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise TimeoutError(f"{argv[0]} timed out after {timeout_s:g} s") from None
    finally:
        reader.join(timeout=5)
    text = "".join(lines)
    return Result(code, text, text)


# --- pre-push verification -------------------------------------------------------------------

Verifier = Callable[[], None]  # raises VerificationFailed when the bundle must not be pushed


def default_verify_argv(zip_path: Path, data: Path) -> list[str]:
    """``python -m harness verify --data DATA --zip ZIP``: the pre-push verification of what is pushed."""
    return [sys.executable, "-m", "harness", "verify", "--data", str(data), "--zip", str(zip_path)]


def command_verifier(argv: list[str], timeout_s: float, runner: Runner,
                     say: Callable[[str], None]) -> Verifier:
    """A Verifier running ``argv``: exit 0 passes, anything else stops the submission."""
    def verify() -> None:
        say(f"==> pre-push verification: {shlex.join(argv)}")
        try:
            result = runner(argv, timeout_s, True)
        except (FileNotFoundError, PermissionError) as exc:
            raise VerificationFailed(f"cannot run the verification command ({exc}); nothing was "
                                     "submitted. Fix --verify-cmd, or run `make verify`") from None
        except TimeoutError:
            raise VerificationFailed(f"pre-push verification did not finish within {timeout_s:g} s; "
                                     "nothing was submitted (raise --verify-timeout)") from None
        if result.returncode != 0:
            raise VerificationFailed(f"pre-push verification failed (exit {result.returncode}); "
                                     "nothing was submitted. Fix what it reported above (`make "
                                     "verify` runs it alone), then re-run `make submit`")
        say("    verification passed")
    return verify


def verification(skip: bool, command: str | None, zip_path: Path, data: Path) -> list[str] | None:
    """The verification argv (None when skipped)."""
    if skip:
        return None
    return shlex.split(command) if command else default_verify_argv(zip_path, data)
