"""What a neighbour's rows keep of the original's pairings, where a cell drawn alone would break them.

Three invariants of ``neighbours.invariants`` are kept here, as ``neighbours.fuzz`` draws each table
(issue 25's artefact classes: each broke a right answer on a neighbour):

* a free column that determines a link column keeps its parent (a car's make its model: the make
  'amc hornet sportabout (sw)' is an amc, never a chevrolet). Before the links are given, a row
  holding an original value of the determinant takes that value's original parent; after, a row
  whose parent is not that value's (its parent was not drawn, or was redrawn) is left out, and a
  value the original lacks keeps the first parent it was drawn with (``ties``, ``keep_ties``);
* a text that starts with its row's other text in the original (a lens 'Canon EF 50mm' of the
  brand 'Canon') still does: another value of the column that does, else another value of the
  first column that it starts with, else the row is left out (``keep_extended``);
* where no two original rows share all of a table's link values (a course listed once on a
  transcript), the rows are drawn from distinct original rows first, new rows take parents at
  random, and a row repeating an earlier one's link values is left out (``once``).

Deterministic, as the rest of the generator: only ``Draw`` decides. Standard library only.
"""

from __future__ import annotations

import collections

from . import invariants as inv
from .links import Linker
from .plan import DROP
from .source import Draw, Focus, Original


class Keeper(Linker):
    """A linker that also keeps ties to parents, extended texts and link rows once (module docstring)."""

    def __init__(self, original: Original, profile: inv.Profile, focus: Focus) -> None:
        super().__init__(original, profile, focus)
        self.ties = {t.name: self._ties(t.name) for t in original.tables}
        self.extended = {t.name: [(self._index(t.name, a), self._index(t.name, b)) for a, b in self.facts[t.name].extends]
                         for t in original.tables}
        self.once = {t.name: self._once(t.name) for t in original.tables}

    def _ties(self, name: str) -> list[tuple[int, int, inv.Link, dict]]:
        """(a, b, b's link, the original's b for each a) for each free column a determining a link column b."""
        free = set(self._free_columns(name))
        out = []
        for a, b in self.facts[name].depends:
            j, k = self._index(name, a), self._index(name, b)
            link = next((k_ for k_ in self.links[name] if [c.lower() for c in k_.child_columns] == [b.lower()]), None)
            if j in free and k not in free and link is not None:
                out.append((j, k, link, {r[j]: r[k] for r in self.sample[name] if r[j] is not None}))
        return out

    def _once(self, name: str) -> list[int]:
        """The columns whose values together no two rows share, unless a gold needs every one repeated."""
        columns = self.facts[name].distinct_links
        if not columns or all(c.lower() in self.focus.grouped for c in columns):
            return []
        return [self._index(name, c) for c in columns]

    # -- ties to parents ----------------------------------------------------------------------------

    def tie_row(self, name: str, row: list) -> None:
        """Before the links are given: a row holding an original value of a determinant takes that
        value's original parent (the link then keeps it where that parent was drawn)."""
        for j, k, _link, mapping in self.ties[name]:
            value = row[j]
            if value is None or value is DROP or value not in mapping or mapping[value] is None:
                continue
            row[k] = mapping[value]

    def keep_ties(self, name: str, rows: list[list], drawn: set[str]) -> None:
        """After the links are given (their parents among ``drawn``): a row whose parent is not its
        determinant's is left out."""
        for j, k, link, mapping in self.ties[name]:
            if link.parent not in drawn or link.parent == name:
                continue  # a link given later (a cycle): not kept
            at = tuple(self._index(link.parent, c) for c in link.parent_columns)
            became = self._became.get((link.parent, at), {})
            wanted: dict = {}
            for value, parent in mapping.items():
                new = became.get((parent,)) if parent is not None else (None,)
                wanted[value] = new[0] if new is not None else DROP  # its parent is not here: no row may hold it
            for row in rows:
                if row[j] is None or row[j] is DROP or row[k] is DROP or not _linked(row[k]):
                    continue
                if wanted.setdefault(row[j], row[k]) != row[k]:
                    row[j] = DROP

    # -- extended texts -----------------------------------------------------------------------------

    def keep_extended(self, name: str, row: list, counts: list[collections.Counter], n: int, draw: Draw) -> None:
        """A text that starts with its row's other text in the original still does (module docstring)."""
        columns = self.columns[name]
        for j, k in self.extended[name]:
            a, b = row[j], row[k]
            if not isinstance(a, str) or not isinstance(b, str) or b.startswith(a):
                continue
            longer = [v for v in columns[k].pool + columns[k].special
                      if isinstance(v, str) and v.startswith(a) and counts[k][v] < self._limit(columns[k], v, n)]
            shorter = [v for v in columns[j].pool + columns[j].special
                       if isinstance(v, str) and b.startswith(v) and counts[j][v] < self._limit(columns[j], v, n)]
            at, value = (k, draw.choice(longer)) if longer else (j, draw.choice(shorter)) if shorter else (k, DROP)
            counts[at][row[at]] -= 1
            row[at] = value
            if value is not DROP:
                counts[at][value] += 1

    # -- link rows once -----------------------------------------------------------------------------

    def distinct_templates(self, name: str, n: int, fit: list[tuple], new: dict, draw: Draw) -> list:
        """Templates for a table whose link rows never repeat: distinct original rows first, then rows
        with new parents (a new row drawn from a sample row, its links at random)."""
        order = draw.shuffled(fit)
        sample = self.sample[name]
        return [(order[i], {}) if i < len(order) else (draw.choice(sample), dict(new)) for i in range(n)]

    def _complete(self, name: str, rows: list[list]) -> list[list]:
        return self.without_repeats(name, super()._complete(name, rows))

    def without_repeats(self, name: str, rows: list[list]) -> list[list]:
        """``rows`` without those repeating an earlier row's values in every column of ``once``."""
        at = self.once[name]
        if not at:
            return rows
        seen: set = set()
        out = []
        for row in rows:
            key = tuple(row[i] for i in at)
            if any(v is None for v in key):
                out.append(row)
            elif key not in seen:
                seen.add(key)
                out.append(row)
        return out


def _linked(value: object) -> bool:
    """Whether a link cell holds a parent's value (not a placeholder for one given later)."""
    return value is not None and type(value) is not object
