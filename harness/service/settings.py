"""Every limit and setting of the grader service, in one table (README, "Grader service").

The service's layers of protection, from the inside out (and, before any of them, a request reaches
a worker only once its request line and headers are in, ``header_timeout_s``: harness.service.worker):

1. the bundle's counted budget (docs/bundle.md, "Cost model": SQLite VM steps plus the charges of
   functions whose work grows with their input, every value capped): a runaway query is stopped
   in-process, the worker answers ``prediction_over_budget`` (the same answer at any load) and
   carries on. An envelope's whole work is bounded that way: at most about 6 s of CPU on a quiet
   2-core machine (2026-12-01) for the costliest query the budgets allow, typically milliseconds;
2. ``envelope_timeout_s``: a watchdog thread in each worker answers 504 and kills the worker when
   one envelope takes longer: at least ten times that bound, so it fires only on a machine far too
   loaded or a broken build; the arbiter forks a replacement at once. The envelope is unscored,
   never a 0.0;
3. ``heartbeat_timeout_s`` (derived): gunicorn's arbiter kills a worker that stopped reporting,
   should the watchdog itself be stuck, and counts it;
4. memory: ``worker_memory_bytes`` as RLIMIT_AS in every worker, ``worker_max_rss_bytes`` retires a
   worker after the request that left it that large; the container's cgroup limit outside.

>>> ServiceSettings().heartbeat_timeout_s
185.0
>>> ServiceSettings(workers=0)
Traceback (most recent call last):
...
harness.common.errors.InputError: service setting workers must be a positive number, got 0
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from harness.common import settings_table
from harness.common.errors import InputError

MiB = 1024 * 1024


def default_workers() -> int:
    """Eight workers per core, 2 to 32. A runaway query holds its worker until the bundle stops it
    (at its step budget now; at a 2 s deadline when the figures below were measured), so the worker
    count bounds how many can be in flight before quick requests queue for a free worker. Measured
    on 2 cores, real Spider eval, a runaway in every 100th request, 32 clients: 4 workers 174 req/s
    with p99 1.8 s, 8 workers 306 req/s with p99 1.1 s, 16 workers 493 req/s with p99 0.13 s;
    without runaways 16 workers lose about a quarter of the peak throughput of 4 (1,670 against
    2,300 req/s). A worker costs about 37 MiB when idle."""
    return max(2, min(32, 8 * (os.cpu_count() or 1)))


# name, unit, meaning: the README's table is checked against this tuple by a test.
SETTINGS = (
    ("workers", "processes", "pre-forked sync worker processes (default: 8 per core, 2 to 32)"),
    ("envelope_timeout_s", "s", "hard limit for grading one envelope: past it the watchdog answers 504 and the worker is killed and replaced"),
    ("request_timeout_s", "s", "deadline of a batch: envelopes not started by then come back unscored (504 items)"),
    ("max_body_bytes", "bytes", "largest body of POST /grade (413 above)"),
    ("max_batch_bytes", "bytes", "largest body of POST /grade/batch and /openrlhf (413 above)"),
    ("max_batch_items", "envelopes", "most envelopes in one batch or OpenRLHF request (413 above)"),
    ("max_requests", "requests", "a worker is recycled after this many requests (plus up to 10% jitter)"),
    ("worker_memory_bytes", "bytes", "RLIMIT_AS (address space) of every worker: an allocation past it fails"),
    ("worker_max_rss_bytes", "bytes", "a worker whose resident memory is above this after a request is retired and replaced"),
    ("graceful_timeout_s", "s", "on SIGTERM, how long in-flight requests may take to finish before workers are killed"),
    ("header_timeout_s", "s", "a client must send its request line and headers within this time (408 after); "
                              "until they are in, its connection waits without holding a worker"),
)


@dataclasses.dataclass(frozen=True)
class ServiceSettings:
    """The service's limits (see ``SETTINGS`` for their meaning); validated on creation."""

    workers: int = dataclasses.field(default_factory=default_workers)
    envelope_timeout_s: float = 180.0
    request_timeout_s: float = 300.0
    max_body_bytes: int = 1 * MiB
    max_batch_bytes: int = 16 * MiB
    max_batch_items: int = 256
    max_requests: int = 2000
    worker_memory_bytes: int = 1024 * MiB
    worker_max_rss_bytes: int = 384 * MiB
    graceful_timeout_s: float = 30.0
    header_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        settings_table.check_positive(self, "service")
        if self.max_batch_bytes < self.max_body_bytes:
            raise InputError("service setting max_batch_bytes must be at least max_body_bytes")

    @property
    def heartbeat_timeout_s(self) -> float:
        """gunicorn's worker timeout: the outermost time layer, a margin above the watchdog's."""
        return self.envelope_timeout_s + 5.0

    @property
    def max_requests_jitter(self) -> int:
        """Spread recycling so that the workers do not all restart at once."""
        return max(1, self.max_requests // 10)


def flag(name: str) -> str:
    """The command-line flag of a setting.

    >>> flag("envelope_timeout_s"), flag("max_body_bytes")
    ('--envelope-timeout', '--max-body-bytes')
    """
    return settings_table.flag_name(name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting, defaulting to the dataclass's default."""
    settings_table.add_flags(parser, ServiceSettings, SETTINGS)


def from_args(args: argparse.Namespace) -> ServiceSettings:
    """The settings the flags of ``add_arguments`` give (InputError on a bad value)."""
    return settings_table.from_flags(args, ServiceSettings, SETTINGS)


def to_argv(settings: ServiceSettings) -> list[str]:
    """Flags reproducing ``settings`` (to start the server in another process or a container).

    >>> to_argv(ServiceSettings(workers=3))[:2]
    ['--workers', '3']
    """
    out: list[str] = []
    for name, _unit, _meaning in SETTINGS:
        out += [flag(name), str(getattr(settings, name))]
    return out
