"""The watchdog: a guard on a query's CPU time that can stop it anywhere, and never decides a verdict.

Counted work decides every verdict (docs/bundle.md, "Cost model"); a progress handler sees only
the VM steps SQLite runs, not the work of preparing a statement or of finishing it. The watchdog
is a thread that watches every guarded call (preparing, stepping, fetching and finishing one
statement) through the CPU clock of the thread that runs it (``time.pthread_getcpuclockid``;
the wall clock where the platform has none), and when a call has used more CPU than its guard,
or more wall time than its deadline, it calls the connection's ``interrupt()``: again on every
poll until the call returns, since SQLite forgets an interrupt that comes while no statement is
stepping (while one is prepared). The call then ends, and its caller reports the guard: the row
is unscored (``infrastructure_timeout``), never 0.0 or 1.0.

A guard is set far above anything a budget allows (at least ten times the costliest query within
its budget, measured at a quarter of a CPU): thread CPU time does not grow with the machine's load,
so a call that reaches it is a broken build or a machine far out of its depth, not a query.

The thread is started on the first watched call of a process (again in a forked child), polls on
its own (a call never wakes it, which would cost the call a switch of threads), and sleeps until
the next watched call after ``PARK_AFTER_S`` with none. Tests drive ``Watchdog.check`` with fake
clocks, never a timer.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

POLL_S = 0.05  # how often a watched call's clocks are read; a guard is many seconds, so this is fine enough
PARK_AFTER_S = 2.0  # the thread sleeps until the next watched call after this long with none

CPU, WALL = "cpu", "wall"  # which guard fired


def _thread_cpu_clock() -> Callable[[], float] | None:
    """A function reading the calling thread's CPU time from any thread, or None where the platform has none."""
    getter = getattr(time, "pthread_getcpuclockid", None)
    if getter is None:
        return None
    try:
        clock_id = getter(threading.get_ident())
        time.clock_gettime(clock_id)
    except (OSError, OverflowError, ValueError):
        return None
    return lambda: time.clock_gettime(clock_id)


class _ThreadClock(threading.local):
    def __init__(self) -> None:
        self.clock = _thread_cpu_clock()


_thread_clock = [_ThreadClock()]  # replaced in a forked child (its one thread is a new one to the kernel)


def current_thread_clock() -> Callable[[], float] | None:
    """This thread's CPU clock, readable from the watchdog's thread (made once per thread)."""
    return _thread_clock[0].clock


class Watch:
    """One watched call: its connection, its thread's CPU clock and the guards; ``fired`` names the
    guard that fired (``cpu`` or ``wall``), None while none has."""

    __slots__ = ("conn", "cpu", "cpu_start", "cpu_limit", "deadline", "fired", "interrupts")

    def __init__(self, conn: Any, cpu: Callable[[], float] | None, cpu_limit: float, deadline: float) -> None:
        self.conn = conn
        self.cpu = cpu
        # Read at the first poll that sees the call, not here: most calls end long before one (a
        # system call saved a call); the guard then counts from at most one poll after the start.
        self.cpu_start: float | None = None
        self.cpu_limit = cpu_limit
        self.deadline = deadline
        self.fired: str | None = None
        self.interrupts = 0

    def cpu_used(self) -> float:
        """CPU seconds of the call's thread since the watchdog first saw the call."""
        if self.cpu is None:
            return 0.0
        now = self.cpu()
        if self.cpu_start is None:
            self.cpu_start = now
        return now - self.cpu_start


class Watchdog:
    """Watches calls and interrupts those past their guards (module docstring).

    ``wall`` is the wall clock; ``thread_clock`` gives the calling thread's CPU clock (None: none);
    ``start_thread`` False leaves polling to the caller (``check``), as tests do.
    """

    def __init__(self, wall: Callable[[], float] = time.monotonic,
                 thread_clock: Callable[[], Callable[[], float] | None] = current_thread_clock,
                 start_thread: bool = True, poll_s: float = POLL_S) -> None:
        self.wall = wall
        self.thread_clock = thread_clock
        self.start_thread = start_thread
        self.poll_s = poll_s
        self.reset()

    def reset(self) -> None:
        """Fresh state (in a forked child the parent's thread does not exist)."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._calls: dict[int, Watch] = {}
        self._thread: threading.Thread | None = None
        self._parked = False

    def start(self, conn: Any, cpu_s: float, wall_s: float) -> Watch:
        """Watch the call that starts now on ``conn``: ``cpu_s`` seconds of this thread's CPU time,
        ``wall_s`` of wall time. ``stop`` it when the call returns (in a ``finally``); the Watch says
        whether a guard fired. Cheap: the thread polls on its own and is woken only when parked."""
        watched = Watch(conn, self.thread_clock(), cpu_s, self.wall() + wall_s)
        lock = self._lock
        lock.acquire()
        try:
            self._calls[id(watched)] = watched
            if self._parked:
                self._changed.notify()
            elif self._thread is None and self.start_thread:
                self._thread = threading.Thread(target=self._run, name="spider-scoring-watchdog", daemon=True)
                self._thread.start()
        finally:
            lock.release()
        return watched

    def stop(self, watched: Watch) -> None:
        """The watched call returned: no interrupt reaches its connection after this."""
        lock = self._lock
        lock.acquire()
        self._calls.pop(id(watched), None)
        lock.release()

    @contextlib.contextmanager
    def watch(self, conn: Any, cpu_s: float, wall_s: float) -> Iterator[Watch]:
        """``start`` and ``stop`` around the block."""
        watched = self.start(conn, cpu_s, wall_s)
        try:
            yield watched
        finally:
            self.stop(watched)

    def check(self) -> int:
        """One poll: interrupt every watched call past a guard (again, for one that fired before).
        Returns how many calls it interrupted."""
        now = self.wall()
        interrupted = 0
        with self._lock:
            for watched in self._calls.values():
                if watched.fired is None:
                    if watched.cpu is not None and watched.cpu_used() > watched.cpu_limit:
                        watched.fired = CPU
                    elif now > watched.deadline:
                        watched.fired = WALL
                if watched.fired is not None:
                    watched.interrupts += 1
                    interrupted += 1
                    try:
                        watched.conn.interrupt()
                    except Exception:  # noqa: BLE001 - a closed connection: its call is ending anyway
                        pass
        return interrupted

    def watching(self) -> int:
        """How many calls are watched now (tests read it)."""
        with self._lock:
            return len(self._calls)

    def _run(self) -> None:
        idle = 0.0
        while True:
            time.sleep(self.poll_s)
            try:
                self.check()
            except Exception:  # noqa: BLE001 - a guard must never take the process down; the next poll tries again
                pass
            with self._lock:
                if self._calls:
                    idle = 0.0
                    continue
                idle += self.poll_s
                if idle < PARK_AFTER_S:
                    continue
                self._parked = True
                while not self._calls:
                    self._changed.wait()
                self._parked, idle = False, 0.0


WATCHDOG = Watchdog()

def _after_fork() -> None:
    WATCHDOG.reset()
    _thread_clock[0] = _ThreadClock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def describe(watched: Watch) -> str:
    """What fired, for the unscored verdict's detail."""
    if watched.fired == CPU:
        return (f"still within its step budget after {watched.cpu_used():.1f} s of CPU, past the "
                f"{watched.cpu_limit:g} s CPU guard: the build or the machine is far out of its depth")
    return ("still within its step budget when the wall-clock guard fired: the machine is far too slow or "
            "overloaded")
