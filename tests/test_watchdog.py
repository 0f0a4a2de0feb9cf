"""The watchdog (bundle/sql/watchdog.py): a guard on the scoring thread's CPU time that stops a call
anywhere (preparing, running, fetching, finishing) and never decides a verdict.

Driven by fake clocks: no test here waits for a guard measured in seconds, and none asserts a
duration. A call the watchdog stops is unscored, whatever SQLite would have answered.
"""

from __future__ import annotations

import sqlite3
import threading

import pytest

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.sql import guard as sql_guard
from bundle.sql import watchdog as sql_watchdog
from bundle.verify import verify
from test_hidden_work import nested_ctes


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeConnection:
    def __init__(self) -> None:
        self.interrupts = 0

    def interrupt(self) -> None:
        self.interrupts += 1


def test_a_call_within_its_guards_is_never_interrupted():
    cpu, wall, conn = FakeClock(), FakeClock(), FakeConnection()
    dog = sql_watchdog.Watchdog(wall=wall, thread_clock=lambda: cpu, start_thread=False)
    with dog.watch(conn, cpu_s=10.0, wall_s=100.0) as watched:
        assert dog.check() == 0  # the first poll to see it: its CPU counted from here
        cpu.now, wall.now = 9.9, 99.0
        assert dog.check() == 0
    assert (watched.fired, conn.interrupts) == (None, 0)


def test_past_its_cpu_guard_a_call_is_interrupted_on_every_poll_until_it_returns():
    # SQLite forgets an interrupt that comes while a statement is being prepared: the watchdog
    # repeats it until the call is over, so that the first step after preparing stops.
    cpu, wall, conn = FakeClock(), FakeClock(), FakeConnection()
    dog = sql_watchdog.Watchdog(wall=wall, thread_clock=lambda: cpu, start_thread=False)
    with dog.watch(conn, cpu_s=10.0, wall_s=100.0) as watched:
        assert dog.check() == 0
        cpu.now = 10.5
        assert [dog.check() for _ in range(3)] == [1, 1, 1]
        assert watched.fired == sql_watchdog.CPU and conn.interrupts == 3
    assert dog.check() == 0 and conn.interrupts == 3  # the call returned: nothing more
    assert dog.watching() == 0


def test_the_cpu_guard_counts_from_the_calls_start():
    cpu, conn = FakeClock(), FakeConnection()
    cpu.now = 1_000.0  # a thread that has worked a long time before this call
    dog = sql_watchdog.Watchdog(wall=FakeClock(), thread_clock=lambda: cpu, start_thread=False)
    with dog.watch(conn, cpu_s=10.0, wall_s=100.0) as watched:
        assert dog.check() == 0
        cpu.now = 1_009.0
        assert dog.check() == 0 and watched.cpu_used() == pytest.approx(9.0)


def test_without_a_thread_cpu_clock_the_wall_deadline_guards():
    wall, conn = FakeClock(), FakeConnection()
    dog = sql_watchdog.Watchdog(wall=wall, thread_clock=lambda: None, start_thread=False)
    with dog.watch(conn, cpu_s=10.0, wall_s=100.0) as watched:
        wall.now = 50.0
        assert dog.check() == 0
        wall.now = 100.5
        assert dog.check() == 1 and watched.fired == sql_watchdog.WALL
    assert "wall-clock guard" in sql_watchdog.describe(watched)


def test_only_the_call_past_its_guard_is_interrupted():
    clocks = {"a": FakeClock(), "b": FakeClock()}
    which = threading.local()
    dog = sql_watchdog.Watchdog(wall=FakeClock(), thread_clock=lambda: clocks[which.name], start_thread=False)
    a, b = FakeConnection(), FakeConnection()
    which.name = "a"
    with dog.watch(a, cpu_s=5.0, wall_s=100.0):
        which.name = "b"
        with dog.watch(b, cpu_s=5.0, wall_s=100.0):
            dog.check()
            clocks["a"].now = 6.0
            dog.check()
    assert (a.interrupts, b.interrupts) == (1, 0)


def test_the_first_poll_reads_the_start_and_a_call_shorter_than_a_poll_costs_no_clock_read():
    reads = []
    cpu = FakeClock()

    def clock() -> float:
        reads.append(cpu.now)
        return cpu.now

    dog = sql_watchdog.Watchdog(wall=FakeClock(), thread_clock=lambda: clock, start_thread=False)
    with dog.watch(FakeConnection(), cpu_s=1.0, wall_s=100.0):
        pass
    assert reads == []


def test_the_watchdog_thread_stops_a_real_statement_while_it_is_prepared(fixture_dbs):
    # A statement whose preparation expands 2**13 copies (no program cap on this raw connection),
    # under a CPU clock that reads past the guard at once: the thread's interrupts, repeated until
    # the call returns, end it at its first step at the latest. The clock is fake; nothing is timed.
    conn = sqlite3.connect(str(fixture_dbs["pets_club"]), check_same_thread=False)
    readings = iter([0.0])  # the first poll reads the start, every later one 10 s past it

    def cpu() -> float:
        return next(readings, 10.0)

    dog = sql_watchdog.Watchdog(thread_clock=lambda: cpu, poll_s=0.01)
    try:
        with dog.watch(conn, cpu_s=1.0, wall_s=10**6) as watched:
            with pytest.raises(sqlite3.OperationalError, match="interrupted"):
                conn.execute(nested_ctes(13)).fetchall()  # about a second preparing, before its first step
        assert watched.fired == sql_watchdog.CPU and watched.interrupts >= 1
    finally:
        conn.close()


def test_a_query_stopped_by_the_watchdog_is_unscored_and_its_connection_replaced(fixture_dbs):
    # A query that never ends within its (huge) budget: whenever the CPU guard is passed, it stops.
    db = str(fixture_dbs["pets_club"])
    limits = DEFAULT_LIMITS.replace(cpu_guard_s=0.05, budget_floor_steps=10**15)
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    before = sql_guard.connection(db, limits).conn
    verdict = verify(endless, "SELECT 1", db, is_sql=True, limits=limits)
    assert (verdict.outcome, verdict.score) == ("infrastructure_timeout", None)
    assert "CPU guard" in verdict.detail
    assert sql_guard.connection(db, limits).conn is not before  # a pending interrupt cannot reach the next query
    assert verify("SELECT 1", "SELECT 1", db, is_sql=True, limits=limits).outcome == "match"
    sql_guard.forget_connections()


def test_the_guard_grows_with_the_budget():
    assert DEFAULT_LIMITS.cpu_guard(DEFAULT_LIMITS.budget_floor_steps) == DEFAULT_LIMITS.cpu_guard_s
    assert DEFAULT_LIMITS.cpu_guard(4 * DEFAULT_LIMITS.budget_floor_steps) == 4 * DEFAULT_LIMITS.cpu_guard_s
