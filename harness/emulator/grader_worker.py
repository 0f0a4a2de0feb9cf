"""A grading worker process (harness.emulator.grader_pool starts it): the bundle imported once, then
one shard of eval rows a line of input, its results (or the error, naming the row) a line of output.

Standard library only: this runs inside the trainer container too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable

from harness.common.bundle_loader import attach_unpacked
from harness.common.errors import HarnessError
from harness.common.results import RowResult
from harness.common.rows import SplitRow
from harness.emulator.grader_job import row_grader


def setup(given: dict) -> Callable[[SplitRow, str], RowResult]:
    """The row grader of the bundle the calling process unpacked (``given``: where, and its names)."""
    loaded = attach_unpacked(given["zip_path"], given["sha256"], given["root"], given["package"], given["entries"])
    return row_grader(loaded, given["function"])


def reply(grade_one: Callable[[SplitRow, str], RowResult], shard: dict) -> dict:
    rows = [SplitRow(row_id, split, tuple(messages)) for row_id, split, messages in shard["rows"]]
    return {"results": [dataclasses.asdict(grade_one(row, completion))
                        for row, completion in zip(rows, shard["completions"])]}


def main() -> None:
    given = json.loads(sys.argv[1])
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the bundle's prints (and anything else on stdout) go to stderr, not into the replies
    try:
        grade_one: Callable[[SplitRow, str], RowResult] | HarnessError = setup(given)
    except HarnessError as exc:  # said on the first shard, as the calling process would have said it
        grade_one = exc
    for line in sys.stdin.buffer:
        try:
            if isinstance(grade_one, HarnessError):
                raise grade_one
            answer = reply(grade_one, json.loads(line))
        except HarnessError as exc:
            answer = {"error": str(exc), "exit_code": exc.exit_code}
        try:
            out.write(json.dumps(answer).encode("utf-8") + b"\n")
            out.flush()
        except BrokenPipeError:  # the calling process is gone (stopped): nobody wants the rest
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())  # so that closing does not complain
            return
