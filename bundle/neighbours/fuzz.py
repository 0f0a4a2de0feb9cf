"""One neighbour database: the original's schema, with new rows that keep every invariant of its data.

``Fuzzer(original, profile, focus).build(path, draw)`` writes the database at ``path`` and returns
the invariants it breaks (``neighbours.proof.violations``; empty for a database fit to judge):

* the original's CREATE statements, unchanged (tables, then indexes; views and triggers last);
* tables drawn parents first (``neighbours.plan``), each between ``focus.scale`` times its original
  rows, at least 3 and at most ``focus.max_rows`` (an empty original table gets a few rows), and
  stored as soon as drawn, so that a child draws among its parents' rows as stored;
* a row starts from an original row whose parents were drawn (values that belong together stay
  together), then each cell is redrawn with probability ``focus.redraw``: from the column's own
  values or, with probability ``focus.special_share``, from its special values; uniqueness,
  NULL-freedom, names' repeats, dependencies and paired values are kept as each row is drawn;
* where the rows are entities others link to (a maker, a model), an entity stays whole: each
  original row at most once, its names with it, its children following it whatever its new key;
  a new entity only where a literal names one (a second 'Kyle' where names repeat, a 'ferret'
  the original lacks), with made-up names beside it and parents at random;
* links, and the repair of what a row the schema refused leaves broken: ``neighbours.links``.

Deterministic: the same original, profile, focus and ``Draw`` seed give the same rows, on any
machine and Python 3.9+ (``Draw`` uses only ``random.random``, whose sequence Python keeps).
"""

from __future__ import annotations

import collections
import os
import sqlite3

from . import invariants as inv
from . import proof as neighbour_proof
from . import thin
from .keep import Keeper
from .links import repair
from .plan import DROP, ColumnPlan
from .source import Draw

MADE_UP = object()  # a new entity's name, made up in ``_cell``
NEW = object()  # a new entity's link value: a parent at random
TWIN = -1  # in a row's given cells: the column whose name it shares with an entity drawn before it


class Fuzzer(Keeper):
    """Draws neighbour databases of one original (module docstring). One build at a time per Fuzzer."""

    def _fill(self, conn: sqlite3.Connection, draw: Draw) -> None:
        """Draw and insert every table, parents first; a child draws among its parents' rows as stored."""
        made: dict[str, list[list]] = {}
        self._became: dict[tuple[str, tuple[int, ...]], dict[tuple, tuple]] = {}
        self._twin_of: dict[tuple[str, tuple[int, ...]], dict[tuple, tuple]] = {}
        deferred = []
        for name in self.order:
            made[name] = self._table_rows(name, made, draw)
            for links in self._link_groups(name):
                if all(k.parent in made and k.parent != name for k in links):
                    self._assign(name, links, made, draw)
                else:
                    deferred.append((name, links))
            self._link_depends(name, made[name])
            self.keep_ties(name, made[name], set(made))
            made[name] = self._insert(conn, name, made[name])
        for name, links in deferred:  # a cycle or a link within one table: its parents are stored now
            self._assign(name, links, made, draw)
        for name in dict.fromkeys(name for name, _links in deferred):
            conn.execute(f"DELETE FROM {inv.quote(name)}")
            made[name] = self._insert(conn, name, made[name])

    def _link_depends(self, name: str, rows: list[list]) -> None:
        """Where a link column determines another (a customer the invoice's billing city), its value follows."""
        free = set(self._free_columns(name))
        for j, k, original in self.depends[name]:
            if j in free:
                continue
            mapping = dict(original)
            for row in rows:
                if row[j] is not None and row[j] is not DROP and row[k] is not DROP:
                    row[k] = mapping.setdefault(row[j], row[k])

    def _insert(self, conn: sqlite3.Connection, name: str, rows: list[list]) -> list[list]:
        """Insert the rows the schema accepts (a CHECK or a key may refuse some); the rows as stored."""
        rows = [[None if v is NEW else v for v in r] for r in self._complete(name, rows)]  # a deferred link: later
        if rows:
            marks = ", ".join("?" * len(self.columns[name]))
            conn.executemany(f"INSERT OR IGNORE INTO {inv.quote(name)} VALUES ({marks})", rows)
        return [list(r) for r in conn.execute(f"SELECT * FROM {inv.quote(name)}")]

    def _size(self, name: str, made: dict[str, list[list]], draw: Draw) -> int:
        facts, focus = self.facts[name], self.focus
        if self.thin:  # a thin database's tables get rows enough for its golds to return some
            low, high = thin.THIN_SIZES
            n = min(focus.max_rows, low + draw.below(high - low))
        elif not facts.rows:
            n = 3 + draw.below(6)  # an empty table gets a few rows: its golds can then return some
        else:
            n = max(3, min(focus.max_rows, round(facts.rows * draw.uniform(*focus.scale))))
        floor, ceiling = 0, self.ceiling[name]
        for link in self.links[name]:
            if link.parent not in made or link.parent == name:
                continue
            parents = self._parent_values(link, made)
            for k, column in enumerate(link.child_columns):
                if self._col(name, column).limit_one:  # each parent value at most once
                    ceiling = min(ceiling, len({p[k] for p in parents}))
            if link.total:
                floor = max(floor, len(parents))
        return max(0, min(max(n, floor), ceiling))

    def _table_rows(self, name: str, made: dict[str, list[list]], draw: Draw) -> list[list]:
        n = self._size(name, made, draw)
        columns, linked = self.columns[name], self.linked[name]
        counts: list[collections.Counter] = [collections.Counter() for _ in columns]
        rows: list[list] = []
        free = set(self._free_columns(name))
        depends = [(j, k, dict(mapping)) for j, k, mapping in self.depends[name] if j in free]  # grows with new values
        for template, named in self._templates(name, n, made, draw):
            twin = named.pop(TWIN, None)
            row = []
            for j, col in enumerate(columns):
                kept = template[j] if template is not None else None
                if col.facts.name.lower() in linked:
                    row.append(named.get(j, kept))  # assigned with its link (NEW: a parent at random)
                elif j in named:
                    row.append(self._cell(col, named[j], False, counts[j], n, draw))
                else:
                    row.append(self._cell(col, kept, template is None, counts[j], n, draw))
            self._keep_together(name, row, depends, counts, n)
            self.keep_extended(name, row, counts, n, draw)
            if twin is not None:
                self._pair_twin(name, rows, row, twin)
            rows.append(row)
            if template is not None and not named and all(row[j] == template[j] for j, c in enumerate(columns)
                                                          if c.name):
                self._remember(name, template, row)  # the same entity: its children follow it
            elif twin is None and any(c.name for c in columns):
                for j, col in enumerate(columns):  # another entity: it takes no parent of the original row's
                    if col.facts.name.lower() in linked:
                        row[j] = NEW
            self.tie_row(name, row)
        return rows

    def _templates(self, name: str, n: int, made: dict[str, list[list]], draw: Draw) -> list[tuple[tuple | None, dict]]:
        """(the original row each new row starts from, the cells it is given instead).

        Original rows whose parents were drawn come first (a model whose maker is there). Where the
        rows are entities others name (a maker, a model), each original row is drawn at most once,
        so that two rows never claim one entity, and a new entity is added only where a literal
        names it (a second student called Kyle: parents at random, other names made up). A literal
        naming an entity of the original brings that entity's row (the 'volvo' model with its
        maker); one the original lacks names a new entity.
        """
        sample, columns = self.sample[name], self.columns[name]
        names = [j for j, c in enumerate(columns) if c.name]
        new = {j: NEW for j, c in enumerate(columns) if c.facts.name.lower() in self.linked[name]}
        drawn = [True] * len(sample)  # whether each parent an original row names (where the original has it) was drawn
        for keys, became in self._parent_checks(name, made):
            for i, key in enumerate(keys):
                if key is not None and became.get(key) is None:
                    drawn[i] = False  # its parent is known, and became nothing here
        fit = [r for r, yes in zip(sample, drawn) if yes]
        rest = [r for r, yes in zip(sample, drawn) if not yes]
        if not names and fit and self.once[name]:
            return self.distinct_templates(name, n, fit, new, draw)
        if not names:
            return [(draw.choice(fit), {}) if fit else (draw.choice(rest), new) if rest else (None, {})
                    for _ in range(n)]
        order = draw.shuffled(fit)
        out: list[tuple[tuple | None, dict]] = []
        special = self.named[name]
        for i in range(n):
            if i >= len(order):  # beyond the original's entities: a new one only where a literal names
                j = draw.choice(special) if special and sample else None  # one the original lacks ('ferret')
                value = draw.choice(columns[j].special) if j is not None else None
                if j is not None and value not in self.holders[name][j] and draw.chance(self.focus.special_share):
                    out.append((draw.choice(sample), {**new, **{k: MADE_UP for k in names}, j: value}))
                elif self.thin:  # a thin table's few entities cannot fill it: new ones, their names made up
                    out.append((draw.choice(sample) if sample else None, {**new, **{k: MADE_UP for k in names}}))
                continue
            if special and draw.chance(self.focus.redraw * self.focus.special_share):
                j = draw.choice(special)
                value = draw.choice(columns[j].special)
                holder = self.holders[name][j].get(value)
                at = next((k for k in range(i, len(order)) if order[k] is holder), None)
                if at is not None:
                    order[i], order[at] = order[at], order[i]
                elif holder is None:
                    out.append((order[i], {**new, j: value}))
                    continue
            out.append((order[i], {}))
        if self.focus.twins:
            out += self._twins(name, out)
        return out

    def _twins(self, name: str, drawn: list[tuple[tuple | None, dict]]) -> list:
        """A second entity named by each literal that names one drawn (a second 'Kyle'), where the
        original repeats names in that column: a query assuming the name unique then shows. It starts
        from its namesake's row, so that it has the same parents (a second make 'amc hornet' is an
        amc too); its other names are made up, and it gets a copy of its namesake's children."""
        columns = self.columns[name]
        names = [j for j, c in enumerate(columns) if c.name]
        out: list[tuple[tuple | None, dict]] = []
        for j in self.named[name]:
            if columns[j].facts.max_repeat < 2:
                continue
            held = {(t[j] if j not in named else named[j]): t for t, named in drawn if t is not None}
            for value in columns[j].special:
                if value in held:
                    out.append((held[value], {**{k: MADE_UP for k in names}, j: value, TWIN: j}))
        return out

    def _parent_checks(self, name: str, made: dict[str, list[list]]) -> list[tuple[tuple, dict]]:
        """Per link of ``name`` to a table drawn before: (each sample row's key there where the
        original's sample holds that parent, else None; what each drawn parent key became)."""
        out = []
        for link in self.links[name]:
            if link.parent not in made or link.parent == name:
                continue  # drawn later (a cycle, a link within the table): not known yet
            at = tuple(self._index(link.parent, c) for c in link.parent_columns)
            out.append((self._known_keys(name, link), self._became.get((link.parent, at), {})))
        return out

    def _known_keys(self, name: str, link: inv.Link) -> tuple:
        """Each sample row's key of ``link`` where the original's sample holds that parent, else None:
        the sample's alone, so read once per original for every draw of every gold."""
        return self._derived(("known keys", name, link), self._sample_keys, name, link)

    def _sample_keys(self, name: str, link: inv.Link) -> tuple:
        child = tuple(self._index(name, c) for c in link.child_columns)
        known = self.known[(link.parent, link.parent_columns)]
        return tuple(k if k in known else None for k in (tuple(r[i] for i in child) for r in self.sample[name]))

    def _pair_twin(self, name: str, rows: list[list], twin: list, j: int) -> None:
        """Remember a twin's key beside its namesake's: the namesake's children are copied to it."""
        first = next((r for r in rows if r[j] == twin[j]), None)
        if first is None:
            return
        for at in self.keys[name]:
            self._twin_of.setdefault((name, at), {})[tuple(first[k] for k in at)] = tuple(twin[k] for k in at)

    def _remember(self, name: str, template: tuple, row: list) -> None:
        """Which new key a row drawn from an original row has, for the children of that original row."""
        for at in self.keys[name]:
            self._became.setdefault((name, at), {}).setdefault(tuple(template[j] for j in at), tuple(row[j] for j in at))

    def _keep_together(self, name: str, row: list, depends: list[tuple[int, int, dict]],
                       counts: list[collections.Counter], n: int) -> None:
        """What the original ties together stays tied: a value two columns share ('CV' as a type's code
        and description), and a value determined by another (a region's continent)."""
        columns = self.columns[name]

        def put(k: int, value: object) -> None:
            if row[k] is not None and row[k] is not DROP:
                counts[k][row[k]] -= 1
            row[k] = value
            if value is not None and value is not DROP:
                counts[k][value] += 1

        for j, k, values in self.pairs[name]:
            if row[j] == row[k] or not (row[j] in values or row[k] in values):
                continue
            value, other = (row[j], k) if row[j] in values else (row[k], j)
            free = counts[other][value] < self._limit(columns[other], value, n)
            put(other, value if free else DROP)  # the value goes where it went in the original, or the row goes
        for j, k, mapping in depends:
            if row[j] is None or row[j] is DROP or row[k] is DROP:
                continue
            wanted = mapping.setdefault(row[j], row[k])
            if wanted != row[k]:
                fits = wanted is None or not self._hard(columns[k]) or \
                    counts[k][wanted] < self._limit(columns[k], wanted, n)
                put(k, wanted if fits else DROP)  # a name repeated too often: the row is left out

    def _cell(self, col: ColumnPlan, value: object, fresh: bool, counts: collections.Counter, n: int, draw: Draw) -> object:
        if value is MADE_UP:
            value = self._unused(col, counts, draw, made_up=True)
            if value is not DROP:
                counts[value] += 1
            return value
        if fresh or (draw.chance(self.focus.redraw) and not col.name):  # names change with ``_templates``
            value = self._pick(col, draw)
        if col.nullable and draw.chance(self.focus.null_share):
            return None
        if value is None and not col.nullable:
            value = self._pick(col, draw)
        if value is None or (not col.facts.kinds and col.facts.nulls):
            return None  # a column the original leaves all NULL stays so
        for _ in range(6):
            if counts[value] < self._limit(col, value, n):
                counts[value] += 1
                return value
            value = self._pick(col, draw)
        if not self._hard(col):
            # a category: any value still under the original's repeats (for the table's size), rather than the
            # last one drawn, which the draw biases to a gold's literal ('Todd Casey' four times in twelve
            # cartoons, where no writer has more than two); where none is left, more: a preference, not an invariant
            value = next((v for v in draw.shuffled(col.pool + col.special) if counts[v] < self._limit(col, v, n)),
                         value)
            counts[value] += 1
            return value
        value = self._unused(col, counts, draw)
        if value is not DROP:
            counts[value] += 1
        return value

    def build(self, path: str, draw: Draw, *, vacuum: bool = False) -> list[str]:
        """Write a neighbour database at ``path`` (replaced atomically); the invariants it breaks."""
        tmp = f"{path}.{os.getpid()}.tmp"
        if os.path.exists(tmp):
            os.remove(tmp)
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=OFF")
            conn.execute("PRAGMA synchronous=OFF")
            conn.execute("BEGIN")
            for table in self.original.tables:
                conn.execute(table.sql)
            for statement in self.original.indexes:
                conn.execute(statement)
            self._fill(conn, draw)
            repair(conn, self.profile)
            for statement in self.original.later:
                conn.execute(statement)
            conn.execute("COMMIT")
            broken = neighbour_proof.violations(self.profile, conn, self.focus.grouped)
            if vacuum:
                conn.execute("VACUUM")
        finally:
            conn.close()
        os.replace(tmp, path)
        return broken
