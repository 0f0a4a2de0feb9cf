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
    from .neighbour_source import Draw, Focus, Original
except ImportError:  # run as a standalone file
    import neighbour_invariants as inv  # type: ignore[no-redef]
    import neighbour_proof  # type: ignore[no-redef]
    import neighbour_values as nv  # type: ignore[no-redef]
    from neighbour_source import Draw, Focus, Original  # type: ignore[no-redef]

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "north", "south", "river", "stone", "green")
_DROP = object()  # a row that cannot be completed within the invariants


@dataclasses.dataclass
class _Column:
    facts: inv.ColumnFacts
    pool: list  # the original's values (sorted: the draw alone decides)
    special: list  # literals and values near them, each fitting the column
    nullable: bool  # may be NULL here
    limit_one: bool  # every value at most once (unique, or a distinct sort key)
    grouped: bool
    rows_then: int  # the original table's rows (repeat caps scale with the table)


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
        self.order = self._key_order()
        self.ceiling = self._ceilings()

    # -- value pools ----------------------------------------------------------------------------
    def _column(self, table: str, j: int, facts: inv.ColumnFacts) -> _Column:
        name = facts.name.lower()
        pool = _ordered(nv.stored(r[j], facts.declared) for r in self.sample[table] if r[j] is not None
                        and nv.fits(facts, r[j]))
        texts = [v for v in pool if isinstance(v, str)]
        own = list(self.focus.literals.get(name, ()))
        untold = [v for v in self.focus.literals.get("", ()) if nv.fits(facts, v)]
        special: list = []
        for value in own + untold:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                near = [value] + nv.near_numbers([value])
                special += near + ([str(v) for v in near if isinstance(v, int)] if "text" in facts.kinds else [])
            elif isinstance(value, str):
                special.append(value)
                if "%" in value or "_" in value:
                    special += nv.like_texts(value, texts)
                if facts.shapes:
                    special += nv.in_format(value, facts.shapes, texts)
        numbers = [v for v in pool if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers:
            special += nv.near_numbers([min(numbers), max(numbers)])
        special = _ordered(nv.stored(v, facts.declared) for v in special if v is not None and nv.fits(facts, v))
        grouped = name in self.focus.grouped
        sort = name in self.focus.sort_columns
        return _Column(facts, pool, special, facts.nulls and not sort, (facts.unique and not grouped) or
                       (sort and self.focus.distinct_sort and name not in self.linked[table]), grouped,
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
        deferred = []
        for name in self.order:
            made[name] = self._table_rows(name, made, draw)
            for links in self._link_groups(name):
                if all(k.parent in made and k.parent != name for k in links):
                    self._assign(name, links, made, draw)
                else:
                    deferred.append((name, links))
            made[name] = self._insert(conn, name, made[name])
        for name, links in deferred:  # a cycle or a link within one table: its parents are stored now
            self._assign(name, links, made, draw)
        for name in dict.fromkeys(name for name, _links in deferred):
            conn.execute(f"DELETE FROM {inv.quote(name)}")
            made[name] = self._insert(conn, name, made[name])

    def _insert(self, conn: sqlite3.Connection, name: str, rows: list[list]) -> list[list]:
        """Insert the rows the schema accepts (a CHECK or a key may refuse some); the rows as stored."""
        rows = self._complete(name, rows)
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
        sample, columns, linked = self.sample[name], self.columns[name], self.linked[name]
        counts: list[collections.Counter] = [collections.Counter() for _ in columns]
        rows = []
        for _ in range(n):
            template = draw.choice(sample) if sample else None
            row = []
            for j, col in enumerate(columns):
                kept = template[j] if template is not None else None
                if col.facts.name.lower() in linked:
                    row.append(kept)  # assigned with its link
                    continue
                row.append(self._cell(col, kept, template is None, counts[j], n, draw))
            rows.append(row)
        return rows

    def _pick(self, col: _Column, draw: Draw) -> object:
        if col.special and draw.chance(self.focus.special_share):
            return draw.choice(col.special)
        if col.pool:
            return draw.choice(col.pool)
        return draw.choice(col.special) if col.special else _filler(col.facts, draw)

    def _cell(self, col: _Column, value: object, fresh: bool, counts: collections.Counter, n: int, draw: Draw) -> object:
        if fresh or draw.chance(self.focus.redraw):
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
            return dict(facts.counts).get(value, 1)  # names keep the original's repeats, no more
        return inv.repeat_cap(facts, col.rows_then, n)

    def _unused(self, col: _Column, counts: collections.Counter, draw: Draw) -> object:
        """A value the column does not hold yet: from its pools, else made up (never for a formatted text)."""
        for value in draw.shuffled(col.pool + col.special):
            if not counts[value]:
                return value
        if col.facts.shapes or not (col.pool or col.special):
            return _DROP
        base = draw.choice(col.pool or col.special)
        for k in range(1, 10_000):
            made = nv.stored(base + 1000 * k if isinstance(base, (int, float)) else f"{base} {k}", col.facts.declared)
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
        """Give every row of ``name`` its link values among the parents' rows (module docstring)."""
        link = links[0]
        at = [self._index(name, c) for c in link.child_columns]
        cols = [self.columns[name][i] for i in at]
        nothing = tuple(None for _ in at)
        if all(not c.facts.kinds and c.facts.nulls for c in cols):
            for row in made[name]:  # the original never fills it: it stays NULL
                for j in at:
                    row[j] = None
            return
        nullable = all(c.nullable for c in cols)
        single = [k for k, c in enumerate(cols) if c.limit_one]  # child columns whose values are each used once
        rows = made[name]
        cap = self._limit(cols[0], None, len(rows))
        cover = draw.shuffled(self._shared_values(links, made))
        total = any(k.total for k in links)
        counts: collections.Counter = collections.Counter()
        used: set = set()
        for i, row in enumerate(rows):
            current = tuple(row[j] for j in at)
            if single:
                value = next((c for c in cover if (c not in counts) and not any((k, c[k]) in used for k in single)),
                             None)
            elif total and i < len(cover):
                value = cover[i]
            elif current in cover and counts[current] < cap and not draw.chance(self.focus.redraw):
                value = current
            elif nullable and draw.chance(self.focus.null_share):
                value = nothing
            else:
                value = self._choose(cover, counts, cap, draw)
            if value is None:
                value = nothing if nullable else tuple(_DROP for _ in at)
            counts[value] += 1
            used.update((k, value[k]) for k in single)
            for j, v in zip(at, value):
                row[j] = v

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
