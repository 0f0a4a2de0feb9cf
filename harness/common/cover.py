"""The fewest sets that cover what all of them do (which neighbours a gold is judged on)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

_EXACT_UP_TO = 10  # sets up to which the fewest are found by trying every choice


def fewest(parts: Sequence[set]) -> tuple[int, ...]:
    """The positions of the fewest ``parts`` whose union is the union of all: the first such choice
    in order of size, then of position. Past ``_EXACT_UP_TO`` parts, the part that adds the most
    is taken in turn (ties: the first).

    >>> fewest([{"a"}, {"b"}, {"a", "b"}]), fewest([{"a"}, {"a", "b"}, {"c"}]), fewest([set(), set()])
    ((2,), (1, 2), ())
    """
    need = set().union(*parts)
    if not need:
        return ()
    if len(parts) <= _EXACT_UP_TO:
        for size in range(1, len(parts) + 1):
            for chosen in itertools.combinations(range(len(parts)), size):
                if set().union(*(parts[i] for i in chosen)) == need:
                    return chosen
    picked: list[int] = []
    covered: set = set()
    while need - covered:
        best = max(range(len(parts)), key=lambda i: (len(parts[i] - covered), -i))
        picked.append(best)
        covered |= parts[best]
    return tuple(sorted(picked))
