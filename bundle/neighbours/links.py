"""A neighbour's links: every row's parent among the parents drawn, and the repair of what still breaks one.

A row keeps its original row's parent where a row drawn from that parent is there (a model keeps
its maker, whatever the maker's key is now), unless redrawn (``focus.link_redraw``); every parent
is given a row where the original references every one; the rows of new entities and the rows
redrawn take parents at random; a unique link column takes each parent at most once. What a
link still breaks once the rows are stored (a row the schema refused) is repaired by deleting
(``repair``): rows without their parent, then parents no row references where the original
references all, until stable.
"""

from __future__ import annotations

import collections
import dataclasses
import sqlite3

from . import invariants as inv
from . import mining as neighbour_mining
from .plan import DROP, Plan, ordered
from .source import Draw


@dataclasses.dataclass
class _Tally:
    """How often each parent is taken, and the values of the child columns used once that are taken."""

    single: list[int]
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    used: set = dataclasses.field(default_factory=set)

    def free(self, value: tuple) -> bool:
        return not any((k, value[k]) in self.used for k in self.single)

    def take(self, value: tuple) -> None:
        self.counts[value] += 1
        self.used.update((k, value[k]) for k in self.single)


def _adopt(chosen: list[tuple | None], cover: list[tuple], tally: _Tally, draw: Draw, share: float) -> None:
    """Each parent without a row here takes, by chance ``share``, a row from a parent that keeps
    another: an engineering department gets a degree, where no parent loses its last row (a volvo
    model stays volvo's when it is volvo's only one)."""
    for parent in cover:
        if tally.counts[parent] or not draw.chance(share):
            continue
        donor = next((i for i, c in enumerate(chosen) if c is not None and tally.counts[c] >= 2), None)
        if donor is None:
            return
        tally.counts[chosen[donor]] -= 1
        chosen[donor] = parent
        tally.take(parent)


def _cover(chosen: list[tuple | None], missing: list[tuple], tally: _Tally) -> None:
    """Give each parent nothing references a row without a parent yet (never one that keeps its
    original parent: the repair removes a parent left without a row)."""
    for value in missing:
        spare = next((i for i, c in enumerate(chosen) if c is None), None)
        if spare is None:
            return
        chosen[spare] = value
        tally.take(value)


class Linker(Plan):
    """A plan that also gives rows their parents (module docstring)."""

    _became: dict[tuple[str, tuple[int, ...]], dict[tuple, tuple]]  # per build: original key -> key drawn
    _twin_of: dict[tuple[str, tuple[int, ...]], dict[tuple, tuple]]  # per build: namesake's key -> twin's key

    def _parent_values(self, link: inv.Link, made: dict[str, list[list]]) -> list[tuple]:
        at = [self._index(link.parent, c) for c in link.parent_columns]
        return ordered(tuple(r[i] for i in at) for r in made[link.parent] if DROP not in r
                        and all(r[i] is not None for i in at))

    def _shared_values(self, links: list[inv.Link], made: dict[str, list[list]]) -> list[tuple]:
        """The values every parent of ``links`` holds."""
        values = self._parent_values(links[0], made)
        for other in links[1:]:
            held = set(self._parent_values(other, made))
            values = [v for v in values if v in held]
        return values

    def _assign(self, name: str, links: list[inv.Link], made: dict[str, list[list]], draw: Draw) -> None:
        """Give every row of ``name`` its link values among the parents' rows (module docstring)."""
        at = [self._index(name, c) for c in links[0].child_columns]
        cols = [self.columns[name][i] for i in at]
        rows = made[name]
        if all(not c.facts.kinds and c.facts.nulls for c in cols):
            for row in rows:  # the original never fills it: it stays NULL
                for j in at:
                    row[j] = None
            return
        nullable = all(c.nullable for c in cols)
        tally = _Tally([k for k, c in enumerate(cols) if c.limit_one])  # child columns whose values are used once
        cover = draw.shuffled(self._shared_values(links, made))
        chosen = self._kept_parents(links[0], rows, at, set(cover), nullable, tally, draw)
        taken = [c for c in chosen if c is not None]
        if taken and self._regroup(links[0]):  # a redrawn entity joins a parent that keeps another (the
            for i, c in enumerate(chosen):  # repeat its gold groups by); a parent left without one goes
                if c is None:
                    chosen[i] = value = draw.choice(taken)
                    tally.take(value)
        if any(c.name for c in self.columns[name]) and not tally.single:
            _adopt(chosen, cover, tally, draw, self.focus.adopt)
        if any(k.total for k in links):
            _cover(chosen, [c for c in cover if not tally.counts[c]], tally)
        cap = self._limit(cols[0], None, len(rows))
        nothing = tuple(None for _ in at)
        for row, value in zip(rows, chosen):
            if value is None:
                if tally.single:
                    value = next((c for c in cover if tally.free(c)), None)
                elif nullable and draw.chance(self.focus.null_share):
                    value = nothing
                else:
                    value = self._choose(cover, tally.counts, cap, draw)
                value = value if value is not None else nothing if nullable else tuple(DROP for _ in at)
                tally.take(value)
            for j, v in zip(at, value):
                row[j] = v
        if not tally.single:
            self._copy_to_twins(name, links[0], rows, at, tally, draw)

    def _copy_to_twins(self, name: str, link: inv.Link, rows: list[list], at: list[int], tally: _Tally,
                       draw: Draw) -> None:
        """A twin (a second 'Kyle') gets a copy of its namesake's first row here and of each other one
        by even chance: it has likes and friends too, not quite the same ones. Not where the copy
        would repeat a value the table holds once (a student who likes one other only)."""
        twins = self._twin_of.get((link.parent, tuple(self._index(link.parent, c) for c in link.parent_columns)), {})
        once = [j for j, c in enumerate(self.columns[name]) if c.limit_one and j not in at]
        given: set = set()
        for row in list(rows) if twins else ():
            value = tuple(row[j] for j in at)
            if value in twins and all(row[j] is None for j in once) and (value not in given or draw.chance(0.5)):
                given.add(value)
                copy = list(row)
                for j, v in zip(at, twins[value]):
                    copy[j] = v
                rows.append(copy)
                tally.take(twins[value])

    def _kept_parents(self, link: inv.Link, rows: list[list], at: list[int], parents: set, nullable: bool,
                      tally: _Tally, draw: Draw) -> list[tuple | None]:
        """Each row's original parent where a row drawn from it is there (its key may be new), or None."""
        key_at = (link.parent, tuple(self._index(link.parent, c) for c in link.parent_columns))
        became = self._became.get(key_at, {})
        known = self.known[(link.parent, link.parent_columns)]
        nothing = tuple(None for _ in at)
        # an entity's parents are facts (the volvo model's maker); a like or a visit may move, and so may
        # an entity's parent where a gold groups by it and the original never repeats one (``_regroup``)
        entity = any(c.name for c in self.columns[link.child])
        redraw = self.focus.regroup if self._regroup(link) else 0.0 if entity else self.focus.link_redraw
        chosen: list[tuple | None] = []
        for row in rows:
            template = tuple(row[j] for j in at)
            current = became.get(template) if template in known else template  # (NEW: in no parent)
            there = current in parents or (template == nothing and nullable)
            keep = there and not draw.chance(redraw) and tally.free(current)  # type: ignore[arg-type]
            chosen.append(current if keep else None)
            if keep:
                tally.take(current)  # type: ignore[arg-type]
        return chosen

    def _regroup(self, link: inv.Link) -> bool:
        """Whether the link's rows are entities that a gold groups by their parent, though the original
        never gives a parent two (a conductor of two orchestras: without one, "the conductors of more
        than one orchestra" is always empty, and so is any answer, right or wrong)."""
        return any(c.name for c in self.columns[link.child]) and all(
            self._col(link.child, c).grouped and self._col(link.child, c).facts.max_repeat < 2
            for c in link.child_columns)

    @staticmethod
    def _choose(choices: list[tuple], counts: collections.Counter, cap: int, draw: Draw) -> tuple | None:
        if not choices:
            return None
        for _ in range(6):
            value = draw.choice(choices)
            if counts[value] < cap:
                return value
        open_ = [c for c in choices if counts[c] < cap]
        return draw.choice(open_) if open_ else draw.choice(choices)

    def _complete(self, name: str, rows: list[list]) -> list[list]:
        """The rows that could be completed, no wider than a row may be (``TableFacts.room``: the scorer
        caps records), without those whose primary key is taken (the schema refuses them)."""
        room = self.facts[name].room
        rows = [r for r in rows if DROP not in r and neighbour_mining.width(r) <= room]
        key = self.facts[name].key
        if len(key) < 2:
            return rows
        at = [self._index(name, c) for c in key]
        seen: set = set()
        out = []
        for row in rows:
            k = tuple(row[i] for i in at)
            if k not in seen:
                seen.add(k)
                out.append(row)
        return out



def repair(conn: sqlite3.Connection, profile: inv.Profile, rounds: int = 20) -> None:
    """Delete rows without their parent, then parents nothing references where the original references all."""
    for _ in range(rounds):
        before = conn.total_changes
        for link in profile.links:
            conn.execute(f"DELETE FROM {inv.quote(link.child)} WHERE {inv.orphans_where(link)}")
            if link.total:
                conn.execute(f"DELETE FROM {inv.quote(link.parent)} WHERE {inv.unreferenced_where(link)}")
        if conn.total_changes == before:
            return


