"""A map over processes of their own: the same results, in order, as the plain loop.

Used where the items are independent and each draws only from its own seeds (prepare's neighbours,
one database each; the near-miss oracle, one database each), so the number of processes never
changes the result. The processes are spawned, not forked: the caller may hold the bundle's
watchdog thread and open SQLite connections, which a fork would copy.

Standard library only (prepare runs in a bare interpreter).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
from collections.abc import Callable, Sequence
from typing import TypeVar

from harness.common.cores import usable_cores

Item = TypeVar("Item")
Result = TypeVar("Result")


def map_in_processes(function: Callable[[Item], Result], items: Sequence[Item],
                     processes: int | None = None, spawn: bool = False) -> list[Result]:
    """``[function(item) for item in items]``, on up to ``processes`` (default: the usable cores)
    spawned processes; in this one when one would do, unless ``spawn`` (a fresh process even for
    one). ``function`` must be a module-level function."""
    count = min(processes or usable_cores(), len(items))
    if count <= 1 and not (spawn and items):
        return [function(item) for item in items]
    with concurrent.futures.ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(function, items))
