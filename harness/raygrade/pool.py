"""Shards of eval rows over a pool of Ray actors: results in row order, a dead worker's shard retried.

The driver keeps one actor per worker slot and gives each idle slot the next shard. A shard whose
actor dies under it (the process killed, its node lost) is put back at the front of the queue and
its slot gets a new actor, a new process (on whatever node has room): the shard is graded again
there, from the start. Only a shard's one completed answer is kept, so no row is lost or counted
twice. A shard that has died ``max_attempts`` times is given up: its rows come back unscored
(``infrastructure_error``, score null, never 0.0) with the reason. An exception the harness's own
code raises in a worker (bad input, a zip that does not load) stops the run with that error.

The run always ends. Shards go only to actors that have started (answered ``ready``), so a
replacement that cannot be placed (the node that died held the spare CPUs) waits in its slot while
the live actors grade the rest; it is stopped at the end. When no actor is live for
``stall_timeout_s`` (all lost, none can start), the run stops with a HarnessError saying so. Every
wait is bounded (``poll_s``), so that check, SIGTERM and Ctrl-C are seen within a second. Ray
itself takes its health-check time to declare a lost node dead (about 15 to 45 s by default).

>>> plan_shards(10, workers=2, shard_rows=None)
[(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
>>> plan_shards(10, workers=2, shard_rows=4)
[(0, 4), (4, 8), (8, 10)]
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from harness.common.errors import HarnessError, InputError
from harness.common.results import RowResult
from harness.common.rows import SplitRow

# Ray's exceptions that mean "the process or node running the call is gone", by name (ray is imported late).
DEATHS = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
          "ObjectLostError", "OwnerDiedError", "LocalRayletDiedError")
SHARDS_PER_WORKER = 4  # default shard size: the rows over 4 shards a worker (progress, cheap retries)
MAX_SHARD_ROWS = 64


def plan_shards(total: int, workers: int, shard_rows: int | None) -> list[tuple[int, int]]:
    """Row ranges [start, stop) covering ``total`` rows in order."""
    size = shard_rows or max(1, min(MAX_SHARD_ROWS, -(-total // (workers * SHARDS_PER_WORKER))))
    return [(start, min(start + size, total)) for start in range(0, total, size)]


class Progress:
    """One line, rewritten in place, on a terminal; nothing when the stream is not one."""

    def __init__(self, total: int, shards: int, workers: int, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.total, self.shards, self.workers = total, shards, workers
        self.rows = self.done = self.retried = 0
        self.started = time.monotonic()

    def update(self, rows: int = 0, retried: int = 0) -> None:
        self.rows += rows
        self.done += 1 if rows else 0
        self.retried += retried
        if self.live:
            again = f", {self.retried} retried" if self.retried else ""
            self.stream.write(f"\rray: {self.rows}/{self.total} rows graded, {self.done}/{self.shards} shards, "
                              f"{self.workers} workers{again}, {time.monotonic() - self.started:.1f} s")
            self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\n")
            self.stream.flush()


@dataclasses.dataclass
class PoolStats:
    shards: int = 0
    retried: int = 0  # shard attempts that died and were queued again
    given_up: int = 0  # shards whose rows came back unscored
    processes: set = dataclasses.field(default_factory=set)  # (node id, pid) that graded a shard
    unpacks: int = 0  # first shards of a process (the zip unpacked there)
    first_shard_s: float = 0.0  # from the pool's start to its first result: actors started, zip fetched and unpacked

    def as_dict(self, node_addresses: dict[str, str] | None = None) -> dict:
        names = node_addresses or {}
        nodes = sorted({names.get(node, node) for node, _pid in self.processes})
        return {"shards": self.shards, "retried": self.retried, "given_up": self.given_up,
                "processes": len(self.processes), "nodes": nodes, "unpacks": self.unpacks,
                "first_shard_s": self.first_shard_s}


def _is_death(ray: Any, exc: BaseException) -> bool:
    return any(isinstance(exc, kind) for kind in (getattr(ray.exceptions, n, None) for n in DEATHS) if kind)


def _raise_worker_error(exc: BaseException) -> None:
    """A Python exception inside a worker: the harness's own typed errors keep their type and exit code."""
    cause = getattr(exc, "cause", None) or exc
    if isinstance(cause, HarnessError):
        raise type(cause)(str(cause)) from None
    raise HarnessError(f"a Ray worker failed while grading: {type(cause).__name__}: {cause}") from None


def given_up(rows: list[SplitRow], completions: list[str], db_of: dict[str, str], attempts: int,
             reason: str) -> list[RowResult]:
    """Unscored results for the rows of a shard whose workers kept dying."""
    detail = (f"unscored: the Ray worker grading this row's shard died {attempts} times ({reason}); the row is "
              "not wrong, grade again (see docs/grading.md, Ray)")
    return [RowResult(r.id, db_of.get(r.id, ""), r.question, r.gold, c, None, None, "infrastructure_error", detail)
            for r, c in zip(rows, completions)]


@dataclasses.dataclass
class Slots:
    """The pool's worker slots: each holds an actor that is starting, idle or grading a shard.

    A slot's actor counts as live once it answered ``ready``; a replacement (a new process, on
    whatever node has room) starts in its slot. Shards go to idle live slots only, so a replacement
    that cannot be placed (no free CPU left after a node died) holds no shard: the live ones grade
    the rest.
    """

    actors: list
    starting: dict = dataclasses.field(default_factory=dict)  # ready ref -> slot
    idle: collections.deque = dataclasses.field(default_factory=collections.deque)
    live: set = dataclasses.field(default_factory=set)

    def start(self, ray: Any, slot: int, make_actor: Callable[[], Any]) -> None:
        self.live.discard(slot)
        if self.actors[slot] is not None:
            _kill(ray, self.actors[slot])
        self.actors[slot] = make_actor()
        self.starting[self.actors[slot].ready.remote()] = slot


def run_pool(ray: Any, make_actor: Callable[[], Any], workers: int, rows: list[SplitRow], completions: list[str],
             shards: list[tuple[int, int]], db_of: dict[str, str], *, max_attempts: int = 3,
             stall_timeout_s: float = 120.0, poll_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
             all_started: bool = False, progress: Progress | None = None) -> tuple[list[RowResult], PoolStats]:
    """Every shard graded once (or given up), results in row order.

    HarnessError when no worker is live for ``stall_timeout_s`` (all lost and none can start);
    ``poll_s`` bounds each wait, so that check and signals (SIGTERM, Ctrl-C) are seen in time.
    ``all_started``: give out the first shard only once every worker has started (or
    ``stall_timeout_s`` passed), so that a benchmark of N workers measures N (bench-ray).
    """
    if max_attempts < 1:
        raise InputError(f"max_attempts is {max_attempts}: give at least 1")
    began = clock()
    slots = Slots([None] * workers)
    for slot in range(workers):
        slots.start(ray, slot, make_actor)
    queue = collections.deque(range(len(shards)))
    attempts = [0] * len(shards)
    done: dict[int, list[RowResult]] = {}
    failed: dict[int, str] = {}  # shard -> why its last attempt died
    inflight: dict[Any, tuple[int, int]] = {}
    stats = PoolStats(shards=len(shards))
    stalled_since = began
    holding = all_started
    try:
        while queue or inflight:
            holding = holding and len(slots.live) < workers and clock() - began < stall_timeout_s
            while queue and slots.idle and not holding:
                slot, shard = slots.idle.popleft(), queue.popleft()
                attempts[shard] += 1
                start, stop = shards[shard]
                inflight[slots.actors[slot].grade.remote(shard, rows[start:stop], completions[start:stop])] = (shard, slot)
            ready, _ = ray.wait(list(inflight) + list(slots.starting), num_returns=1, timeout=poll_s)
            if slots.live:
                stalled_since = clock()
            elif clock() - stalled_since > stall_timeout_s:
                raise HarnessError(_stalled(workers, stall_timeout_s, len(done), len(shards)))
            if not ready:
                continue
            ref = ready[0]
            if ref in slots.starting:
                _started(ray, slots, slots.starting.pop(ref), ref, make_actor)
                continue
            shard, slot = inflight.pop(ref)
            try:
                answer = ray.get(ref)
            except Exception as exc:  # classified: a dead worker is retried, anything else stops the run
                if not _is_death(ray, exc):
                    _raise_worker_error(exc)
                slots.start(ray, slot, make_actor)
                if attempts[shard] < max_attempts:
                    queue.appendleft(shard)
                    stats.retried += 1
                    if progress:
                        progress.update(retried=1)
                else:
                    failed[shard] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                continue
            slots.idle.append(slot)
            done[shard] = [RowResult(**r) for r in answer["results"]]
            stats.first_shard_s = stats.first_shard_s or clock() - began
            stats.processes.add((answer["node"], answer["pid"]))
            stats.unpacks += bool(answer["unpacked"])
            if progress:
                progress.update(rows=len(done[shard]))
    finally:
        _close(ray, slots)
    return _in_order(shards, done, failed, attempts, rows, completions, db_of, stats), stats


def _started(ray: Any, slots: Slots, slot: int, ref: Any, make_actor: Callable[[], Any]) -> None:
    """A starting actor answered: live and idle, or (it died starting) replaced again."""
    try:
        ray.get(ref)
    except Exception as exc:
        if not _is_death(ray, exc):
            _raise_worker_error(exc)
        slots.start(ray, slot, make_actor)
        return
    slots.live.add(slot)
    slots.idle.append(slot)


def _stalled(workers: int, seconds: float, done: int, shards: int) -> str:
    return (f"no Ray worker was alive for {seconds:g} s ({done} of {shards} shards graded): the {workers} worker(s) "
            "were lost and none could start again. The cluster has no free CPU (a node died?): see `ray status`, "
            "add a node, or grade with fewer --ray-workers; --ray-stall-timeout sets how long to wait")


def _in_order(shards: list[tuple[int, int]], done: dict, failed: dict, attempts: list[int], rows: list[SplitRow],
              completions: list[str], db_of: dict[str, str], stats: PoolStats) -> list[RowResult]:
    """Every shard's results in row order; a given-up shard's rows unscored."""
    results: list[RowResult] = []
    for shard, (start, stop) in enumerate(shards):
        if shard in failed:
            stats.given_up += 1
            results += given_up(rows[start:stop], completions[start:stop], db_of, attempts[shard], failed[shard])
        else:
            results += done[shard]
    return results


def _kill(ray: Any, actor: Any) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # already gone with its node: nothing to stop
        pass


def _close(ray: Any, slots: Slots, timeout_s: float = 30.0) -> None:
    """Remove each live actor's unpacked copy, then stop every actor (a starting one is only stopped)."""
    refs = [slots.actors[slot].close.remote() for slot in sorted(slots.live)]
    try:
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    finally:
        for actor in slots.actors:
            if actor is not None:
                _kill(ray, actor)
