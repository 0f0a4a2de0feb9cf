"""Grading an eval split on several worker processes, with the same results as one process.

The rows are cut into shards of consecutive rows; each worker process (harness.emulator.grader_worker)
imports the bundle once (the copy the calling process unpacked, read-only, under the same package
name) and grades the shards it
is given, one at a time, as soon as it is free; the results are put back in row order. A row's
result is a function of the row, its completion and the bundle alone, so the results are the same,
byte for byte once written, whatever the number of workers.

Workers are ordinary ``python3`` processes started with this interpreter, its flags and its import
path, speaking JSON lines over their standard input and output (no shared memory and no semaphore,
which the trainer's locked-down container does not give). Anything the bundle prints goes to
stderr. They run in a session of their own: a Ctrl-C (or SIGTERM, SIGHUP) reaches the calling process
only, which stops them all and lets the interrupt through, before anything is written. A worker that finds its input
closed (its caller gone) exits.

Standard library only: this runs inside the trainer container too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

from harness.common.bundle_loader import LoadedBundle
from harness.common.errors import UnexpectedError, error_for_exit_code
from harness.common.interrupts import interrupt_on_signals, interrupts_held
from harness.common.results import RowResult
from harness.common.rows import SplitRow

SHARDS_A_WORKER = 8  # shards cut per worker, so that a worker with slow rows does not hold the rest back
MOST_ROWS_A_SHARD = 32
ROWS_A_WORKER = 4  # the default uses no more workers than a worker per 4 rows: starting one costs more


def shards(rows: int, workers: int) -> list[tuple[int, int]]:
    """Consecutive (start, end) spans covering ``rows`` rows, about SHARDS_A_WORKER a worker.

    >>> shards(10, 2)
    [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9), (9, 10)]
    >>> shards(100, 2)[:2], len(shards(100, 2))
    ([(0, 7), (7, 14)], 15)
    >>> shards(0, 4)
    []
    """
    size = max(1, min(MOST_ROWS_A_SHARD, -(-rows // (workers * SHARDS_A_WORKER))))
    return [(start, min(start + size, rows)) for start in range(0, rows, size)]


def default_workers(rows: int, cores: int) -> int:
    """Every core, but no more workers than ``rows // ROWS_A_WORKER`` (at least one).

    >>> default_workers(1034, 2), default_workers(20, 8), default_workers(3, 2)
    (2, 5, 1)
    """
    return max(1, min(cores, rows // ROWS_A_WORKER))


def workers_used(workers: int, rows: int) -> int:
    """The worker processes ``grade_on_workers`` starts for ``rows`` rows (1: none, the rows graded in
    the calling process)."""
    return 1 if workers <= 1 or rows <= 1 else min(workers, len(shards(rows, workers)))


class Worker:
    """One worker process: ``grade`` sends it a shard and waits for its results."""

    def __init__(self, loaded: LoadedBundle, function: str, number: int) -> None:
        self.number = number
        setup = {"path": sys.path, "zip_path": loaded.zip_path, "sha256": loaded.sha256, "root": str(loaded.root),
                 "package": loaded.package, "entries": loaded.entries, "function": function}
        code = "import json, sys; sys.path[:0] = json.loads(sys.argv[1])['path']; " \
               "from harness.emulator.grader_worker import main; main()"
        flags = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]  # -I, -S... as this one
        self.process = subprocess.Popen([sys.executable, *flags, "-c", code, json.dumps(setup)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)

    def grade(self, rows: list[SplitRow], completions: list[str]) -> list[RowResult]:
        assert self.process.stdin is not None and self.process.stdout is not None
        shard = {"rows": [[r.id, r.split, list(r.messages)] for r in rows], "completions": completions}
        try:
            self.process.stdin.write(json.dumps(shard).encode("utf-8") + b"\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except OSError:
            line = b""
        if not line:
            code = self.process.wait()
            raise UnexpectedError(f"grading worker process {self.number} (pid {self.process.pid}) ended with exit "
                                  f"code {code} while grading eval rows {rows[0].id} to {rows[-1].id}; its "
                                  "messages are above")
        reply = json.loads(line)
        if "error" in reply:
            kind = error_for_exit_code(reply["exit_code"])
            raise kind(f"{reply['error']} (in grading worker process {self.number}, pid {self.process.pid})")
        return [RowResult(**r) for r in reply["results"]]

    def close(self, kill: bool) -> None:
        """Let the process end (its input closed), or kill it."""
        if kill:
            self.process.kill()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=None if kill else 30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def grade_on_workers(loaded: LoadedBundle, rows: list[SplitRow], completions: list[str], *, workers: int,
                     function: str = "grader", say: Callable[[str], None] = lambda line: None) -> list[RowResult]:
    """``grade_rows`` of harness.emulator.grader_job on ``workers`` processes; the results in row order."""
    spans = shards(len(rows), workers)
    workers = min(workers, len(spans))
    done: list[list[RowResult] | None] = [None] * len(spans)
    pending: Iterator[int] = iter(range(len(spans)))
    lock, stop = threading.Lock(), threading.Event()
    failures: list[BaseException] = []

    def feed(worker: Worker) -> None:
        while not stop.is_set():
            with lock:
                k = next(pending, None)
            if k is None:
                return
            start, end = spans[k]
            try:
                done[k] = worker.grade(rows[start:end], completions[start:end])
            except BaseException as exc:  # the first failure stops every worker; the caller raises it
                with lock:
                    failures.append(exc)
                stop.set()
                return

    say(f"grading {len(rows)} rows on {workers} worker processes, {len(spans)} shards")
    pool: list[Worker] = []
    threads: list[threading.Thread] = []
    interrupted = True
    try:
        with interrupt_on_signals():  # SIGTERM and SIGHUP stop the workers as Ctrl-C does
            for n in range(1, workers + 1):
                with interrupts_held():  # a worker started is a worker recorded, which the cleanup stops
                    pool.append(Worker(loaded, function, n))
            threads.extend(threading.Thread(target=feed, args=(w,), name=f"grader-worker-{w.number}") for w in pool)
            for thread in threads:
                thread.start()
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)  # in short waits, so that a Ctrl-C reaches this thread at once
        interrupted = False
    finally:
        stop.set()
        for worker in pool:
            worker.close(kill=interrupted or bool(failures))
        for thread in threads:
            if thread.ident is not None:  # started (an interrupt may come between two starts)
                thread.join()
    if failures:
        raise failures[0]
    return [result for shard in done if shard is not None for result in shard]

