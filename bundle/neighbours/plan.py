"""What each table and column of one original may take in its neighbours: the plan the generator draws by.

``Plan(original, profile, focus)`` works out, once per original and focus, for every column its
pool (the original's values, sorted: only the draw decides) and its special values (the literals
queries compare it with, values near them and near its extremes, each keeping the column's
storage classes and text format), whether it may be NULL, whether each value may appear once
(unique, or a distinct sort key), how often one may repeat, whether it names an entity others
link to; for every table its links, the keys its children use, its dependencies and paired
values, the order tables are drawn in (parents first) and the most rows it can take.
``neighbours.links`` and ``neighbours.fuzz`` draw by it.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any

from . import invariants as inv
from . import thin
from . import values as nv
from .source import Draw, Focus, Original, OriginalTable

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "north", "south", "river", "stone", "green")
DROP = object()  # a row that cannot be completed within the invariants


@dataclasses.dataclass
class ColumnPlan:
    facts: inv.ColumnFacts
    pool: list  # the original's values (sorted: the draw alone decides)
    special: list  # literals and values near them, each fitting the column
    nullable: bool  # may be NULL here
    limit_one: bool  # every value at most once (unique, or a distinct sort key)
    grouped: bool
    rows_then: int  # the original table's rows (repeat caps scale with the table)
    name: bool = False  # an entity's name in a table others link to: kept with its row, else a new entity


def ordered(values) -> list:
    return sorted(set(values), key=lambda v: (type(v).__name__, repr(v)))


class Plan:
    """The columns and tables of one original, as its neighbours may fill them (module docstring)."""

    def __init__(self, original: Original, profile: inv.Profile, focus: Focus) -> None:
        self.original, self.profile, self.focus = original, profile, focus
        self.thin = thin.thin_profile(profile)  # tables of a few rows at most: filled from values of their types
        self._positions: dict[tuple[str, str], int] = {}  # (table, column as named) -> its index (``_index``)
        self.facts = {t.name: profile.table(t.name) for t in original.tables}
        self.sample = {t.name: t.rows for t in original.tables}
        self.links = {t.name: profile.links_of(t.name) for t in original.tables}
        self.linked = {t: {c.lower() for k in links for c in k.child_columns} for t, links in self.links.items()}
        self.columns = {t.name: [self._column(t.name, j, c) for j, c in enumerate(self.facts[t.name].columns)]
                        for t in original.tables}
        self._share_link_literals()
        self.keys = {t.name: sorted({tuple(self._index(t.name, c) for c in k.parent_columns)
                                     for links in self.links.values() for k in links if k.parent == t.name})
                     for t in original.tables}  # the column sets children link to
        for name, keys in self.keys.items():
            self._mark_names(name, {j for at in keys for j in at})
        self.named = {t.name: [j for j, c in enumerate(self.columns[t.name]) if c.name and c.special]
                      for t in original.tables}
        self.holders = {t.name: {j: self._derived(("holders", t.name, j), self._holders, t.name, j)
                                 for j in self.named[t.name]} for t in original.tables}  # read only
        self.known = {(k.parent, k.parent_columns): self._derived(("known", k.parent, k.parent_columns), self._known,
                                                                  k.parent, k.parent_columns)
                      for links in self.links.values() for k in links}  # the original's parents (a sample; read only)
        self.pairs = {t.name: self._pairs(t) for t in original.tables}
        self.depends = {t.name: self._depends(t) for t in original.tables}
        self.order = self._key_order()
        self.ceiling = self._ceilings()

    def _mark_names(self, table: str, key_at: set[int]) -> None:
        """The columns naming the entities of a table others link to: its nearly distinct texts. A text
        key is a name where the table has no other ('volvo' names a model); beside a name it is a code,
        which may change as ids do ('ABW' for Aruba: a query hard-coding it is told apart)."""
        columns = self.columns[table]
        texts = [j for j, col in enumerate(columns) if col.facts.kinds == ("text",) and key_at and
                 (col.facts.unique or col.facts.near_unique) and col.facts.name.lower() not in self.linked[table]]
        others = any(j not in key_at for j in texts)
        for j in texts:
            columns[j].name = j not in key_at or not others

    # -- value pools ----------------------------------------------------------------------------

    def _column(self, table: str, j: int, facts: inv.ColumnFacts) -> ColumnPlan:
        name = facts.name.lower()
        pool = self._pool(table, j, facts)
        texts = [v for v in pool if isinstance(v, str)]
        spelled = {v.lower(): v for v in texts}
        own = list(self.focus.literals.get(name, ()))
        # a literal whose column cannot be told is offered to text columns only if it is a text
        untold = [v for v in self.focus.literals.get("", ()) if isinstance(v, str) and nv.fits(facts, v)]
        special: list = []
        for value in own + untold:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                near = [value] + nv.near_numbers([value])
                special += near + ([str(v) for v in near if isinstance(v, int)] if "text" in facts.kinds else [])
            elif isinstance(value, str):
                # a literal the original writes in another case ('korea' for 'Korea') is offered as the
                # original writes it; one it writes with other spaces ('Aberdeen ') as the query does
                special.append(spelled.get(value.lower(), value))
                if facts.shapes:
                    special += nv.in_format(value, facts.shapes, texts)
        for pattern in self.focus.patterns.get(name, ()):  # LIKE is blind to case: the original's spelling
            special += [spelled.get(t.lower(), t) for t in nv.like_texts(pattern)]
        numbers = [v for v in pool if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers:
            special += nv.near_numbers([min(numbers), max(numbers)])
        special = ordered(nv.stored(v, facts.declared) for v in special if v is not None and nv.fits(facts, v))
        # a gold's BETWEEN bound only where the original holds it: there the two readings of "between" differ
        bounds = {nv.stored(v, facts.declared) for v in self.focus.ranges.get(name, ())}.difference(pool)
        special = [v for v in special if v not in bounds]
        # a column a gold needs repeated loses its uniqueness, unless the schema's key holds it
        grouped = name in self.focus.grouped and name not in {k.lower() for k in self.facts[table].key}
        sort = name in self.focus.sort_columns
        distinct = name in self.focus.distinct and name not in self.linked[table] and not grouped
        return ColumnPlan(facts, pool, special, facts.nulls and not sort, (facts.unique and not grouped) or distinct
                       or (sort and self.focus.distinct_sort and name not in self.linked[table]), grouped,
                       self.facts[table].rows)

    def _derived(self, key: tuple, make: Callable[..., object], *args: object) -> Any:
        """``make(*args)``, read once per original: what depends on its sample alone (never changed by a user)."""
        found = self.original.derived.get(key)
        if found is None:
            found = self.original.derived[key] = make(*args)
        return found

    def _holders(self, table: str, j: int) -> dict:
        """The sample row holding each value of column ``j`` (the last where several do)."""
        return {r[j]: r for r in self.sample[table]}

    def _known(self, parent: str, columns: tuple[str, ...]) -> set[tuple]:
        """The keys the sample of ``parent`` holds in ``columns``."""
        return {tuple(r[self._index(parent, c)] for c in columns) for r in self.sample[parent]}

    def _pool(self, table: str, j: int, facts: inv.ColumnFacts) -> list:
        """The values the original's sample holds in column ``j`` that fit it, as stored; read once per
        original (every plan of every gold drawn from it shares them: callers copy before changing)."""
        return list(self._derived(("pool", table, j, facts), self._sample_values, table, j, facts))

    def _sample_values(self, table: str, j: int, facts: inv.ColumnFacts) -> tuple:
        found = ordered(nv.stored(r[j], facts.declared) for r in self.sample[table]
                        if r[j] is not None and nv.fits(facts, r[j]))
        if self.thin:  # two values, or none, cannot fill a table: values of the column's type beside them
            found = ordered(v for v in (nv.stored(w, facts.declared) for w in
                                        thin.widened(facts.kinds, facts.declared, facts.shapes, found))
                            if v is not None and nv.fits(facts, v))
        return tuple(found)

    def _share_link_literals(self) -> None:
        """A literal compared with a child column is offered to its parent column too (it must exist there)."""
        for links in self.links.values():
            for link in links:
                for cc, pc in zip(link.child_columns, link.parent_columns):
                    child = self._col(link.child, cc)
                    parent = self._col(link.parent, pc)
                    extra = [nv.stored(v, parent.facts.declared) for v in child.special if nv.fits(parent.facts, v)]
                    parent.special = ordered(parent.special + extra)

    def _free_columns(self, table: str) -> list[int]:
        return [j for j, c in enumerate(self.columns[table]) if c.facts.name.lower() not in self.linked[table]]

    def _pairs(self, table: OriginalTable) -> list[tuple[int, int, frozenset]]:
        """(a, b, values): a row holding one of the values in a or b holds it in both (invariants)."""
        return [(self._index(table.name, a), self._index(table.name, b), frozenset(v))
                for a, b, v in self.facts[table.name].paired]

    def _depends(self, table: OriginalTable) -> list[tuple[int, int, dict]]:
        """(a, b, the original's value of b for each value of a) for each column determining another
        (b never a link column: a link's value comes from its parent)."""
        free = set(self._free_columns(table.name))
        out = []
        for a, b in self.facts[table.name].depends:
            j, k = self._index(table.name, a), self._index(table.name, b)
            if k in free:
                out.append((j, k, {r[j]: r[k] for r in table.rows if r[j] is not None}))
        return out

    def _col(self, table: str, name: str) -> ColumnPlan:
        return next(c for c in self.columns[table] if c.facts.name.lower() == name.lower())

    def _index(self, table: str, column: str) -> int:
        at = self._positions.get((table, column))
        if at is None:
            at = self._positions[(table, column)] = next(
                j for j, c in enumerate(self.columns[table]) if c.facts.name.lower() == column.lower())
        return at

    def _key_order(self) -> list[str]:
        """Tables with every table they link to first; a cycle is broken where it closes."""
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(name: str) -> None:
            if state.get(name):
                return
            state[name] = 1
            for link in self.links[name]:
                if link.parent != name and link.parent in self.links and not state.get(link.parent):
                    visit(link.parent)
            state[name] = 2
            order.append(name)

        for table in self.original.tables:
            visit(table.name)
        return order

    def _ceilings(self) -> dict[str, int]:
        """Most rows each table can take: formatted unique values cannot be made up, and a parent whose
        every row must be referenced can have no more rows than its child can take."""
        ceiling = {}
        for name, columns in self.columns.items():
            ceiling[name] = self.focus.max_rows
            for col in columns:
                if col.limit_one and col.facts.shapes and col.facts.name.lower() not in self.linked[name]:
                    ceiling[name] = min(ceiling[name], len(set(col.pool) | set(col.special)))
        for _ in range(len(ceiling)):
            changed = False
            for links in self.links.values():
                for link in links:
                    unique = any(self._col(link.child, c).limit_one for c in link.child_columns)
                    if link.total and link.parent != link.child and ceiling[link.child] < ceiling[link.parent]:
                        ceiling[link.parent], changed = ceiling[link.child], True
                    if unique and ceiling[link.parent] < ceiling[link.child]:
                        ceiling[link.child], changed = ceiling[link.parent], True
            if not changed:
                break
        return ceiling

    # -- rows -------------------------------------------------------------------------------------

    def _link_groups(self, name: str) -> list[list[inv.Link]]:
        """The table's links, those of the same child columns together (a value must be in every parent)."""
        groups: dict[tuple[str, ...], list[inv.Link]] = {}
        for link in self.links[name]:
            groups.setdefault(tuple(c.lower() for c in link.child_columns), []).append(link)
        return list(groups.values())

    def _pick(self, col: ColumnPlan, draw: Draw) -> object:
        if col.special and draw.chance(self.focus.special_share):
            return draw.choice(col.special)
        if col.pool:
            return draw.choice(col.pool)
        return draw.choice(col.special) if col.special else filler(col.facts, draw)

    @staticmethod
    def _hard(col: ColumnPlan) -> bool:
        """Whether the column's limit is an invariant (unique, or a name's repeats) rather than a preference."""
        return col.limit_one or (col.facts.near_unique and not col.grouped)

    def _limit(self, col: ColumnPlan, value: object, n: int) -> int:
        facts = col.facts
        if col.grouped:
            return n
        if col.limit_one:
            return 1
        if facts.near_unique:
            return facts.max_repeat  # names repeat no more than the original repeats one
        scaled = -(-facts.max_repeat * n // col.rows_then) if col.rows_then else n
        return max(facts.max_repeat, scaled)  # a category: as often as in the original, for the table's size

    def _unused(self, col: ColumnPlan, counts: collections.Counter, draw: Draw, made_up: bool = False) -> object:
        """A value the column does not hold yet: from its pools, else (or first, for a new entity's
        name: it must not be an original entity's) made up; never a made-up formatted text."""
        for value in () if made_up and not col.facts.shapes else draw.shuffled(col.pool + col.special):
            if not counts[value]:
                return value
        if col.facts.shapes or not (col.pool or col.special):
            return DROP
        base = draw.choice(col.pool or col.special)
        for k in range(1, 10_000):  # a made-up text holds no original value: 'math 2' would answer LIKE '%math%'
            made = nv.stored(base + 1000 * k if isinstance(base, (int, float)) else f"{draw.choice(WORDS)} {k}",
                             col.facts.declared)
            if not counts[made] and nv.fits(col.facts, made):
                return made
        return DROP

    # -- links ------------------------------------------------------------------------------------


def filler(facts: inv.ColumnFacts, draw: Draw) -> object:
    """A value for a column the original never filled (an empty table): a small number or a word."""
    number = inv.affinity(facts.declared) in ("integer", "real", "numeric")
    return 1 + draw.below(10) if number else draw.choice(WORDS)
