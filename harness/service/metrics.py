"""Counters per outcome, request counts and latencies, in the Prometheus text format.

Several worker processes serve the same port, so each keeps its figures in memory-mapped files in
one directory and ``GET /metrics`` (answered by whichever worker) sums them: prometheus_client's
multiprocess mode. Why that and not a hand-made store: it is the de-facto standard for
pre-fork servers (gunicorn is its documented example), counters of a worker that was killed or
recycled are kept (totals never go backwards), and a scrape costs one read of a few small files.
The directory lives on a tmpfs (``/tmp`` in the container) and is emptied when the server
starts. When a worker exits, the arbiter drops its live gauges and folds its counters and
histograms into one archive file per kind (``compact``), so the folder holds the live workers'
files and two archives, however many workers were recycled or killed.

The mode is chosen when prometheus_client is first imported, so ``Metrics.create`` sets
``PROMETHEUS_MULTIPROC_DIR`` and only then imports it; the server's entry point calls it before
anything else could import the library.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ENV = "PROMETHEUS_MULTIPROC_DIR"
LOCK_FILE = ".metrics.lock"  # not *.db: never read as metrics
# Latency buckets: a grade takes about a millisecond; a runaway stops at its step budget (about 0.6 s
# on the development machine, 2026-12-01), the bundle's wall-clock guard at 30 s.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def prepare_directory(path: str | os.PathLike) -> Path:
    """Create ``path`` (if needed) and remove the figures a previous run left there."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()
    return path


def rss_bytes() -> int:
    """This process's resident memory now (Linux /proc), else its peak (getrusage)."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


class Metrics:
    """The service's metrics. Create once in the arbiter, before the workers are forked."""

    def __init__(self, directory: Path, outcomes: Iterable[str]) -> None:
        from prometheus_client import Counter, Gauge, Histogram, values
        if "MultiProcess" not in getattr(values.ValueClass, "__qualname__", ""):
            raise RuntimeError("prometheus_client was imported before PROMETHEUS_MULTIPROC_DIR was set: "
                               "create the metrics with Metrics.create() first thing in the process")
        self.directory = directory
        self.requests = Counter("spider_grader_requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"])
        self.outcomes = Counter("spider_grader_outcomes", "envelopes graded, by the bundle's outcome "
                                "(infrastructure_error and gold_error are unscored)", ["outcome"])
        self.errors = Counter("spider_grader_errors", "answers that are not a score, by error type",
                              ["error"])
        self.worker_exits = Counter("spider_grader_worker_exits", "workers stopped by the service, by reason",
                                    ["reason"])
        self.latency = Histogram("spider_grader_request_seconds", "time to answer, by endpoint",
                                 ["endpoint"], buckets=BUCKETS)
        self.rss = Gauge("spider_grader_worker_rss_bytes", "resident memory of each live worker after its "
                         "last request", multiprocess_mode="liveall")
        # Per worker (pid label), not summed: it shows which worker is busy, or stuck.
        self.in_flight = Gauge("spider_grader_in_flight", "grading requests being answered by each live worker",
                               multiprocess_mode="liveall")
        self.bundle = Gauge("spider_grader_bundle_info", "the served bundle (value 1)",
                            ["sha256", "sqlite_runtime", "sqlite_built"], multiprocess_mode="max")
        for outcome in outcomes:  # every outcome appears, at 0, from the first scrape
            self.outcomes.labels(outcome)

    @classmethod
    def create(cls, directory: str | os.PathLike, outcomes: Iterable[str]) -> Metrics:
        """Empty ``directory``, switch prometheus_client to multiprocess mode there, build the metrics."""
        path = prepare_directory(directory)
        os.environ[ENV] = str(path)
        metrics = cls(path, outcomes)
        # The arbiter serves no request: drop the zero-valued live gauges its creation wrote, so only
        # workers appear in them (each worker writes its own files after the fork). Its counter file
        # stays: the arbiter counts the workers it stops for a missed heartbeat.
        from prometheus_client import multiprocess
        multiprocess.mark_process_dead(os.getpid(), str(path))
        return metrics

    def describe_bundle(self, sha256: str, sqlite_runtime: str, sqlite_built: str) -> None:
        self.bundle.labels(sha256, sqlite_runtime, sqlite_built).set(1)

    def sample_rss(self) -> int:
        """Record this worker's resident memory; returns it."""
        value = rss_bytes()
        self.rss.set(value)
        return value

    def render(self) -> bytes:
        """Every process's figures, summed, in the Prometheus text format."""
        from prometheus_client import CollectorRegistry, generate_latest
        registry = CollectorRegistry()
        registry.register(_SettledFiles(self.directory))
        return generate_latest(registry)

    def worker_exited(self, pid: int) -> None:
        """In the arbiter, when a worker exits: its live gauges go, its counts join the archive."""
        from prometheus_client import multiprocess
        multiprocess.mark_process_dead(pid, str(self.directory))
        compact(self.directory, pid)


def _locked(directory: Path, mode: int):
    """An flock on the folder's lock file: shared for a scrape, exclusive for a compaction."""
    @contextlib.contextmanager
    def held():
        with open(directory / LOCK_FILE, "a+b") as handle:
            fcntl.flock(handle, mode)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    return held()


def compact(directory: Path, pid: int) -> int:
    """Add an exited worker's counters and histograms into ``<kind>_archive.db``, then drop its files.

    Without this, every worker that ever lived (recycled every ``max_requests``, or killed) would
    leave its files behind: the tmpfs would fill and every scrape read more files. Done under the
    exclusive lock that scrapes share, so no scrape sees a count twice or not at all (a counter
    that seems to go back is read by Prometheus as a reset). Returns the number of values moved.
    """
    from prometheus_client.mmap_dict import MmapedDict  # after Metrics.create chose the mode (module docstring)
    moved = 0
    with _locked(directory, fcntl.LOCK_EX):
        for kind in ("counter", "histogram"):
            dead = directory / f"{kind}_{pid}.db"
            if not dead.exists():
                continue
            values = list(MmapedDict.read_all_values_from_file(str(dead)))
            archive = MmapedDict(str(directory / f"{kind}_archive.db"))
            try:
                for key, value, timestamp, _pos in values:
                    total, _when = archive.read_value(key)
                    archive.write_value(key, total + value, timestamp)
                    moved += 1
            finally:
                archive.close()
            dead.unlink()
        # Gauges of the dead worker: the live ones went with mark_process_dead; what is left is the
        # zero its copy of the arbiter-set bundle_info holds (mode max: the arbiter's 1 wins).
        for gauge in directory.glob(f"gauge_*_{pid}.db"):
            gauge.unlink()
    return moved


class _SettledFiles:
    """prometheus_client's multiprocess collector, minus a race with workers that come and go.

    A worker forked a moment ago may have created its file but not yet sized it (reading it then
    fails with ``struct.error``), and the arbiter removes an exited worker's live-gauge files
    (``FileNotFoundError`` between listing and reading). Files not yet sized are left out of this
    scrape (they hold nothing yet); a file that vanished makes the scrape read the folder again.
    """

    def __init__(self, directory: Path, attempts: int = 5) -> None:
        self.directory, self.attempts = directory, attempts

    def collect(self):
        with _locked(self.directory, fcntl.LOCK_SH):  # never in the middle of a compaction
            return self._collect()

    def _collect(self):
        from prometheus_client.multiprocess import MultiProcessCollector
        for attempt in range(self.attempts):
            files = []
            for path in self.directory.glob("*.db"):
                try:
                    if path.stat().st_size >= 8:
                        files.append(str(path))
                except FileNotFoundError:
                    continue
            try:
                return MultiProcessCollector.merge(files, accumulate=True)
            except (FileNotFoundError, struct.error):
                if attempt == self.attempts - 1:
                    raise
        return []
