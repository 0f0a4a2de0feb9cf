"""One neighbour database: the original's schema, with new rows that keep every invariant of its data.

``Fuzzer(original, profile, focus).build(path, draw)`` writes the database at ``path`` and returns
the invariants it breaks (``neighbour_proof.violations``; empty for a database fit to judge):

* the original's CREATE statements, unchanged (tables, then indexes; views and triggers last);
* tables filled parents first along the links (declared keys and the inclusions the data shows);
  a link's child values are drawn among the parent's generated rows, every parent value is used
  where the original uses every one, a unique link column takes each parent value at most once;
* each table gets between ``focus.scale`` times its original rows, at least 3 and at most
  ``focus.max_rows`` (an empty original table gets a few rows);
* a row starts as a copy of an original row (values that belong together stay together), then
  each cell is redrawn with probability ``focus.redraw``: from the column's own values or, with
  probability ``focus.special_share``, from its *special* values (the literals the queries compare
  it with, values near them and near its extremes), only values that keep its storage classes and
  text format; uniqueness, NULL-freedom and repeat caps are kept as each cell is drawn;
* what breaks a link after all (a row the schema refuses) is repaired by deleting: rows without
  their parent, then parents no row references where the original references all, until stable.

Deterministic: the same original, profile, focus and ``Draw`` seed give the same rows, on any
machine and Python 3.9+ (``Draw`` uses only ``random.random``, whose sequence Python keeps).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import sqlite3

try:
    from . import neighbour_invariants as inv
    from . import neighbour_proof
    from . import neighbour_values as nv
    from .neighbour_source import Draw, Focus, Original, OriginalTable
except ImportError:  # run as a standalone file
    import neighbour_invariants as inv  # type: ignore[no-redef]
    import neighbour_proof  # type: ignore[no-redef]
    import neighbour_values as nv  # type: ignore[no-redef]
    from neighbour_source import Draw, Focus, Original, OriginalTable  # type: ignore[no-redef]

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "north", "south", "river", "stone", "green")
_DROP = object()  # a row that cannot be completed within the invariants
_MADE_UP = object()  # a new entity's name, made up in ``_cell``
_NEW = object()  # a new entity's link value: a parent at random
_TWIN = -1  # in a row's given cells: the column whose name it shares with an entity drawn before it


@dataclasses.dataclass
class _Column:
    facts: inv.ColumnFacts
    pool: list  # the original's values (sorted: the draw alone decides)
    special: list  # literals and values near them, each fitting the column
    nullable: bool  # may be NULL here
    limit_one: bool  # every value at most once (unique, or a distinct sort key)
    grouped: bool
    rows_then: int  # the original table's rows (repeat caps scale with the table)
    name: bool = False  # an entity's name in a table others link to: kept with its row, else a new entity


def _ordered(values) -> list:
    return sorted(set(values), key=lambda v: (type(v).__name__, repr(v)))


class Fuzzer:
    """Draws neighbour databases of one original (module docstring)."""

    def __init__(self, original: Original, profile: inv.Profile, focus: Focus) -> None:
        self.original, self.profile, self.focus = original, profile, focus
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
            for col in self.columns[name] if keys else ():  # a text key too: 'volvo' names a model
                facts = col.facts
                col.name = facts.kinds == ("text",) and (facts.unique or facts.near_unique) and \
                    facts.name.lower() not in self.linked[name]
        self.named = {t.name: [j for j, c in enumerate(self.columns[t.name]) if c.name and c.special]
                      for t in original.tables}
        self.holders = {t.name: {j: {r[j]: r for r in t.rows} for j in self.named[t.name]} for t in original.tables}
        self.known = {(k.parent, k.parent_columns): {tuple(r[self._index(k.parent, c)] for c in k.parent_columns)
                                                     for r in self.sample[k.parent]}
                      for links in self.links.values() for k in links}  # the original's parents (a sample)
        self.pairs = {t.name: self._pairs(t) for t in original.tables}
        self.depends = {t.name: self._depends(t) for t in original.tables}
        self.order = self._key_order()
        self.ceiling = self._ceilings()

    # -- value pools ----------------------------------------------------------------------------
    def _column(self, table: str, j: int, facts: inv.ColumnFacts) -> _Column:
        name = facts.name.lower()
        pool = _ordered(nv.stored(r[j], facts.declared) for r in self.sample[table] if r[j] is not None
                        and nv.fits(facts, r[j]))
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
            special += [spelled.get(t.lower(), t) for t in nv.like_texts(pattern, texts)]
        numbers = [v for v in pool if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers:
            special += nv.near_numbers([min(numbers), max(numbers)])
        special = _ordered(nv.stored(v, facts.declared) for v in special if v is not None and nv.fits(facts, v))
        # a column a gold needs repeated loses its uniqueness, unless the schema's key holds it
        grouped = name in self.focus.grouped and name not in {k.lower() for k in self.facts[table].key}
        sort = name in self.focus.sort_columns
        distinct = name in self.focus.distinct and name not in self.linked[table] and not grouped
        return _Column(facts, pool, special, facts.nulls and not sort, (facts.unique and not grouped) or distinct
                       or (sort and self.focus.distinct_sort and name not in self.linked[table]), grouped,
                       self.facts[table].rows)

    def _share_link_literals(self) -> None:
        """A literal compared with a child column is offered to its parent column too (it must exist there)."""
        for links in self.links.values():
            for link in links:
                for cc, pc in zip(link.child_columns, link.parent_columns):
                    child = self._col(link.child, cc)
                    parent = self._col(link.parent, pc)
                    extra = [nv.stored(v, parent.facts.declared) for v in child.special if nv.fits(parent.facts, v)]
                    parent.special = _ordered(parent.special + extra)

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

    def _col(self, table: str, name: str) -> _Column:
        return next(c for c in self.columns[table] if c.facts.name.lower() == name.lower())

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
                if row[j] is not None and row[j] is not _DROP and row[k] is not _DROP:
                    row[k] = mapping.setdefault(row[j], row[k])

    def _insert(self, conn: sqlite3.Connection, name: str, rows: list[list]) -> list[list]:
        """Insert the rows the schema accepts (a CHECK or a key may refuse some); the rows as stored."""
        rows = [[None if v is _NEW else v for v in r] for r in self._complete(name, rows)]  # a deferred link: later
        if rows:
            marks = ", ".join("?" * len(self.columns[name]))
            conn.executemany(f"INSERT OR IGNORE INTO {inv.quote(name)} VALUES ({marks})", rows)
        return [list(r) for r in conn.execute(f"SELECT * FROM {inv.quote(name)}")]

    def _size(self, name: str, made: dict[str, list[list]], draw: Draw) -> int:
        facts, focus = self.facts[name], self.focus
        if not facts.rows:
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
            twin = named.pop(_TWIN, None)
            row = []
            for j, col in enumerate(columns):
                kept = template[j] if template is not None else None
                if col.facts.name.lower() in linked:
                    row.append(named.get(j, kept))  # assigned with its link (_NEW: a parent at random)
                elif j in named:
                    row.append(self._cell(col, named[j], False, counts[j], n, draw))
                else:
                    row.append(self._cell(col, kept, template is None, counts[j], n, draw))
            self._keep_together(name, row, depends, counts, n)
            if twin is not None:
                self._pair_twin(name, rows, row, twin)
            rows.append(row)
            if template is not None and not named and all(row[j] == template[j] for j, c in enumerate(columns)
                                                          if c.name):
                self._remember(name, template, row)  # the same entity: its children follow it
            elif any(c.name for c in columns):
                for j, col in enumerate(columns):  # another entity: it takes no parent of the original row's
                    if col.facts.name.lower() in linked:
                        row[j] = _NEW
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
        new = {j: _NEW for j, c in enumerate(columns) if c.facts.name.lower() in self.linked[name]}
        fit = [r for r in sample if self._parents_drawn(name, r, made)]
        rest = [r for r in sample if not self._parents_drawn(name, r, made)]
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
                    out.append((draw.choice(sample), {**new, **{k: _MADE_UP for k in names}, j: value}))
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
            out += self._twins(name, out, new, draw)
        return out

    def _twins(self, name: str, drawn: list[tuple[tuple | None, dict]], new: dict, draw: Draw) -> list:
        """A second entity named by each literal that names one drawn (a second 'Kyle'), where the
        original repeats names in that column: a query assuming the name unique then shows."""
        columns, sample = self.columns[name], self.sample[name]
        names = [j for j, c in enumerate(columns) if c.name]
        out: list[tuple[tuple | None, dict]] = []
        for j in self.named[name]:
            if columns[j].facts.max_repeat < 2:
                continue
            held = {(t[j] if j not in named else named[j]) for t, named in drawn if t is not None}
            for value in columns[j].special:
                if value in held and sample:
                    out.append((draw.choice(sample), {**new, **{k: _MADE_UP for k in names}, j: value, _TWIN: j}))
        return out

    def _parents_drawn(self, name: str, row: tuple, made: dict[str, list[list]]) -> bool:
        """Whether each parent an original row names (where the original has it) was drawn."""
        for link in self.links[name]:
            if link.parent not in made or link.parent == name:
                continue  # drawn later (a cycle, a link within the table): not known yet
            key = tuple(row[self._index(name, c)] for c in link.child_columns)
            at = tuple(self._index(link.parent, c) for c in link.parent_columns)
            if key in self.known[(link.parent, link.parent_columns)] and \
                    self._became.get((link.parent, at), {}).get(key) is None:
                return False
        return True

    def _pair_twin(self, name: str, rows: list[list], twin: list, j: int) -> None:
        """Remember a twin's key beside its namesake's: the namesake's children are shared between them."""
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
            if row[k] is not None and row[k] is not _DROP:
                counts[k][row[k]] -= 1
            row[k] = value
            if value is not None and value is not _DROP:
                counts[k][value] += 1

        for j, k, values in self.pairs[name]:
            if row[j] == row[k] or not (row[j] in values or row[k] in values):
                continue
            value, other = (row[j], k) if row[j] in values else (row[k], j)
            free = counts[other][value] < self._limit(columns[other], value, n)
            put(other, value if free else _DROP)  # the value goes where it went in the original, or the row goes
        for j, k, mapping in depends:
            if row[j] is None or row[j] is _DROP or row[k] is _DROP:
                continue
            wanted = mapping.setdefault(row[j], row[k])
            if wanted != row[k]:
                fits = wanted is None or not self._hard(columns[k]) or \
                    counts[k][wanted] < self._limit(columns[k], wanted, n)
                put(k, wanted if fits else _DROP)  # a name repeated too often: the row is left out

    def _pick(self, col: _Column, draw: Draw) -> object:
        if col.special and draw.chance(self.focus.special_share):
            return draw.choice(col.special)
        if col.pool:
            return draw.choice(col.pool)
        return draw.choice(col.special) if col.special else _filler(col.facts, draw)

    def _cell(self, col: _Column, value: object, fresh: bool, counts: collections.Counter, n: int, draw: Draw) -> object:
        if value is _MADE_UP:
            value = self._unused(col, counts, draw, made_up=True)
            if value is not _DROP:
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
            counts[value] += 1  # a category may repeat more than the original's: a preference, not an invariant
            return value
        value = self._unused(col, counts, draw)
        if value is not _DROP:
            counts[value] += 1
        return value

    @staticmethod
    def _hard(col: _Column) -> bool:
        """Whether the column's limit is an invariant (unique, or a name's repeats) rather than a preference."""
        return col.limit_one or (col.facts.near_unique and not col.grouped)

    def _limit(self, col: _Column, value: object, n: int) -> int:
        facts = col.facts
        if col.grouped:
            return n
        if col.limit_one:
            return 1
        if facts.near_unique:
            return facts.max_repeat  # names repeat no more than the original repeats one
        scaled = -(-facts.max_repeat * n // col.rows_then) if col.rows_then else n
        return max(facts.max_repeat, scaled)  # a category: as often as in the original, for the table's size

    def _unused(self, col: _Column, counts: collections.Counter, draw: Draw, made_up: bool = False) -> object:
        """A value the column does not hold yet: from its pools, else (or first, for a new entity's
        name: it must not be an original entity's) made up; never a made-up formatted text."""
        for value in () if made_up and not col.facts.shapes else draw.shuffled(col.pool + col.special):
            if not counts[value]:
                return value
        if col.facts.shapes or not (col.pool or col.special):
            return _DROP
        base = draw.choice(col.pool or col.special)
        for k in range(1, 10_000):  # a made-up text holds no original value: 'math 2' would answer LIKE '%math%'
            made = nv.stored(base + 1000 * k if isinstance(base, (int, float)) else f"{draw.choice(WORDS)} {k}",
                             col.facts.declared)
            if not counts[made] and nv.fits(col.facts, made):
                return made
        return _DROP

    # -- links ------------------------------------------------------------------------------------
    def _link_groups(self, name: str) -> list[list[inv.Link]]:
        """The table's links, those of the same child columns together (a value must be in every parent)."""
        groups: dict[tuple[str, ...], list[inv.Link]] = {}
        for link in self.links[name]:
            groups.setdefault(tuple(c.lower() for c in link.child_columns), []).append(link)
        return list(groups.values())

    def _parent_values(self, link: inv.Link, made: dict[str, list[list]]) -> list[tuple]:
        at = [self._index(link.parent, c) for c in link.parent_columns]
        return _ordered(tuple(r[i] for i in at) for r in made[link.parent] if _DROP not in r
                        and all(r[i] is not None for i in at))

    def _shared_values(self, links: list[inv.Link], made: dict[str, list[list]]) -> list[tuple]:
        """The values every parent of ``links`` holds."""
        values = self._parent_values(links[0], made)
        for other in links[1:]:
            held = set(self._parent_values(other, made))
            values = [v for v in values if v in held]
        return values

    def _index(self, table: str, column: str) -> int:
        return next(j for j, c in enumerate(self.columns[table]) if c.facts.name.lower() == column.lower())

    def _assign(self, name: str, links: list[inv.Link], made: dict[str, list[list]], draw: Draw) -> None:
        """Give every row of ``name`` its link values among the parents' rows (module docstring).

        A row keeps its original row's parent where a row drawn from that parent is there (a model
        keeps its maker, whatever the maker's key is now), unless redrawn (``focus.link_redraw``);
        then every parent is given a row where the original references every one; the rows of new
        entities (``_templates``) and the rows redrawn take parents at random.
        """
        link = links[0]
        at = [self._index(name, c) for c in link.child_columns]
        cols = [self.columns[name][i] for i in at]
        rows = made[name]
        if all(not c.facts.kinds and c.facts.nulls for c in cols):
            for row in rows:  # the original never fills it: it stays NULL
                for j in at:
                    row[j] = None
            return
        nothing = tuple(None for _ in at)
        nullable = all(c.nullable for c in cols)
        single = [k for k, c in enumerate(cols) if c.limit_one]  # child columns whose values are each used once
        cover = draw.shuffled(self._shared_values(links, made))
        parents = set(cover)
        counts: collections.Counter = collections.Counter()
        used: set = set()
        chosen: list[tuple | None] = []
        key_at = (link.parent, tuple(self._index(link.parent, c) for c in link.parent_columns))
        became, twins = self._became.get(key_at, {}), self._twin_of.get(key_at, {})
        known = self.known[(link.parent, link.parent_columns)]
        for row in rows:  # keep the original's relation where the parent is there (its key may be new)
            template = tuple(row[j] for j in at)
            current = became.get(template) if template in known else template  # (_NEW: in no parent)
            if current in twins and draw.chance(0.5):
                current = twins[current]  # the namesake's children are shared with its twin
            there = current in parents or (template == nothing and nullable)
            keep = there and not draw.chance(self.focus.link_redraw) and \
                not any((k, current[k]) in used for k in single)  # type: ignore[index]
            chosen.append(current if keep else None)
            if keep:
                counts[current] += 1
                used.update((k, current[k]) for k in single)  # type: ignore[index]
        if any(k.total for k in links):
            self._cover(chosen, [c for c in cover if not counts[c]], counts, used, single)
        cap = self._limit(cols[0], None, len(rows))
        for i, row in enumerate(rows):
            value = chosen[i]
            if value is None:
                if single:
                    value = next((c for c in cover if not any((k, c[k]) in used for k in single)), None)
                elif nullable and draw.chance(self.focus.null_share):
                    value = nothing
                else:
                    value = self._choose(cover, counts, cap, draw)
                value = value if value is not None else nothing if nullable else tuple(_DROP for _ in at)
                counts[value] += 1
                used.update((k, value[k]) for k in single)
            for j, v in zip(at, value):
                row[j] = v

    @staticmethod
    def _cover(chosen: list, missing: list[tuple], counts: collections.Counter, used: set, single: list[int]) -> None:
        """Give each parent nothing references a row without a parent yet (never one that keeps its
        original parent: the repair removes a parent left without a row)."""
        for value in missing:
            spare = next((i for i, c in enumerate(chosen) if c is None), None)
            if spare is None:
                return
            old = chosen[spare]
            if old is not None:
                counts[old] -= 1
                used.difference_update((k, old[k]) for k in single)
            chosen[spare] = value
            counts[value] += 1
            used.update((k, value[k]) for k in single)

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
        """The rows that could be completed, without those whose primary key is taken (the schema refuses them)."""
        rows = [r for r in rows if _DROP not in r]
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

    # -- the file ---------------------------------------------------------------------------------
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


def _filler(facts: inv.ColumnFacts, draw: Draw) -> object:
    """A value for a column the original never filled (an empty table): a small number or a word."""
    number = inv.affinity(facts.declared) in ("integer", "real", "numeric")
    return 1 + draw.below(10) if number else draw.choice(WORDS)
