"""The SQL functions a query may call, and what each one costs (docs/bundle.md, "Cost model").

Work is counted in SQLite VM steps, and one step must not hide unbounded work. Three rules:

* **Every value is small.** Strings and blobs (and the records SQLite builds from them) are
  capped at ``Limits.max_cell_bytes`` (``SQLITE_LIMIT_LENGTH``), so an operator (``||``, a
  comparison, a cast, a sort or index comparison) does at most that much work in one step.
* **Work that grows with a function's input is charged.** The functions below in ``CHARGED``
  are replaced, per connection, by a wrapper that first charges the query's meter
  ``charge_base_steps`` plus the input's size (or the product of two inputs' sizes for the
  searching functions: LIKE, GLOB, instr, replace, trim) divided by ``charge_bytes_per_step``,
  then lets SQLite's own function compute the result on a side connection (same SQLite, same
  limits, so results and errors are SQLite's own). A query that cannot afford a call is over
  its budget before the call runs.
* **Only deterministic functions.** Random values, the clock, the local time zone and anything
  that differs between SQLite builds (version strings, functions only some builds have) are
  refused: the names in ``REFUSED`` are registered as stubs, so that a query naming one is
  ``forbidden`` on every SQLite, whether that SQLite has the function or not. Date and time
  functions run, but refuse ``'now'``, ``'localtime'`` and ``'utc'`` (and no argument at all).

The allow-list is what SQLite 3.34 (the oldest the bundle is tested on, Python 3.9) and later all
have, minus the refused names.

>>> sorted(CHARGED)[:4]
['char', 'date', 'datetime', 'glob']
>>> "random" in ALLOWED or "random" in CHARGED
False
"""

from __future__ import annotations

import ctypes
import os
import sqlite3
import threading
from collections.abc import Callable

from . import planner as sql_planner

COST_MODEL = 4  # bump when what is charged changes: stored gold steps of other models are not used

# What a query pays besides its VM steps and its charged functions (cost model v3): preparing its
# statement, per character of SQL (parsing and code generation are linear in the text once the
# program's size is capped: ``Limits.max_program_ops``), and every cell it hands back to Python
# (the conversion of a value into a Python object is work no VM step counts). Both are charged
# before the query is judged, the same on every machine; the base is ``charge_base_steps``.
COMPILE_CHARS_PER_STEP = 1
CELL_STEPS = 2
# Cost model v4: what the query planner weighs (``sql.planner.weight``: over every FROM clause, the
# cube of the tables it joins) is charged too, this many steps a unit of weight: the planner's
# costliest work per unit of weight measured (tables tied by ``=`` on every key column, 4 to 10 of
# them: up to about 66 microseconds on the 2-core development machine) then costs at most a few
# hundred nanoseconds a step, as a real gold's steps do.
PLAN_STEPS_PER_WEIGHT = 200

# Collations whose comparisons do work no step counts (a comparison under NOCASE folds case byte by
# byte, one under RTRIM scans trailing spaces, and a sort or an index compares log2(n) times per
# step): removed from every guarded connection, so that a query naming one is ``forbidden``.
# Spider's golds and schemas use none (docs/bundle.md, "Cost model"); BINARY stays.
REFUSED_COLLATIONS = ("NOCASE", "RTRIM")

# Builtins that run as they are: constant work per call, or work bounded by the value cap.
ALLOWED = frozenset("""
abs coalesce ifnull iif likelihood likely max min nullif round typeof unicode unlikely zeroblob
avg count group_concat sum total
row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value
""".split())

LINEAR, PRODUCT, CLOCK = "linear", "product", "clock"
# name -> (arities as SQLite defines them, -1 for any; how the call is charged)
CHARGED: dict[str, tuple[tuple[int, ...], str]] = {
    "length": ((1,), LINEAR), "lower": ((1,), LINEAR), "upper": ((1,), LINEAR), "hex": ((1,), LINEAR),
    "quote": ((1,), LINEAR), "char": ((-1,), LINEAR), "substr": ((2, 3), LINEAR),
    "substring": ((2, 3), LINEAR), "like": ((2, 3), PRODUCT), "glob": ((2,), PRODUCT),
    "instr": ((2,), PRODUCT), "replace": ((3,), PRODUCT), "trim": ((1, 2), PRODUCT),
    "ltrim": ((1, 2), PRODUCT), "rtrim": ((1, 2), PRODUCT),
    "date": ((-1,), CLOCK), "time": ((-1,), CLOCK), "datetime": ((-1,), CLOCK),
    "julianday": ((-1,), CLOCK), "strftime": ((-1,), CLOCK),
}

# Refused on every SQLite: not deterministic (random, the clock, the connection's history, the
# build), not bounded in one step (printf's width), or present only in some SQLite versions or
# builds (math, JSON, newer string functions), so that the verdict would depend on the machine.
REFUSED = frozenset("""
random randomblob current_date current_time current_timestamp unixepoch timediff
sqlite_version sqlite_source_id sqlite_compileoption_get sqlite_compileoption_used sqlite_offset
changes total_changes last_insert_rowid load_extension printf format soundex
concat concat_ws string_agg unhex octet_length median percentile percentile_cont percentile_disc
sign acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log log10
log2 mod pi pow power radians sin sinh sqrt tan tanh trunc
json json_array json_array_length json_error_position json_extract json_insert json_object
json_patch json_pretty json_quote json_remove json_replace json_set json_type json_valid
json_group_array json_group_object jsonb jsonb_array jsonb_extract jsonb_insert jsonb_object
jsonb_patch jsonb_remove jsonb_replace jsonb_set jsonb_group_array jsonb_group_object
fts3_tokenizer highlight snippet offsets matchinfo bm25 match rtreecheck rtreedepth rtreenode
""".split())

CALLABLE = ALLOWED | frozenset(CHARGED)
_CLOCK_WORDS = frozenset({"now", "localtime", "utc"})

# sqlite3 limit categories (numeric values from sqlite3.h; Python names them only from 3.11).
LIMIT_LENGTH, LIMIT_SQL_LENGTH, LIMIT_VDBE_OP, LIMIT_ATTACHED, LIMIT_LIKE_PATTERN, LIMIT_WORKER_THREADS = 0, 1, 5, 7, 8, 11


def cost_model(limits: object) -> dict:
    """What a step count means under ``limits``: stored gold steps hold only where this is equal."""
    names = ("max_cell_bytes", "charge_base_steps", "charge_bytes_per_step", "progress_steps")
    return {"version": COST_MODEL, **{name: int(getattr(limits, name)) for name in names},
            "compile_chars_per_step": COMPILE_CHARS_PER_STEP, "cell_steps": CELL_STEPS,
            "plan_steps_per_weight": PLAN_STEPS_PER_WEIGHT}


def compile_charge(sql: str, base: int) -> int:
    """Steps charged for preparing ``sql``: the base, one step per ``COMPILE_CHARS_PER_STEP`` characters
    and ``PLAN_STEPS_PER_WEIGHT`` per unit of its join weight (``sql.planner.weight``).

    >>> compile_charge("SELECT count(*) FROM singer", 100)
    327
    >>> compile_charge("SELECT count(*) FROM singer AS a JOIN singer AS b", 100) - compile_charge("SELECT 1", 100)
    1641
    """
    return base + len(sql) // COMPILE_CHARS_PER_STEP + sql_planner.weight(sql) * PLAN_STEPS_PER_WEIGHT


def refused_collation(message: str) -> str | None:
    """The refused collation an SQLite error message names (``no such collation sequence: nocase``), or None.

    >>> refused_collation("no such collation sequence: rtrim"), refused_collation("no such table: t")
    ('RTRIM', None)
    """
    head = "no such collation sequence: "
    text = message.strip()
    if text.lower().startswith(head) and text[len(head):].strip().upper() in REFUSED_COLLATIONS:
        return text[len(head):].strip().upper()
    return None


def remove_collations(conn: sqlite3.Connection) -> None:
    """Remove ``REFUSED_COLLATIONS`` from ``conn``: a query that needs one fails to prepare, naming it.

    Python 3.9 and 3.10 remove only a collation registered from Python: one is registered first."""
    for name in REFUSED_COLLATIONS:
        conn.create_collation(name, _never_compares)
        conn.create_collation(name, None)


def _never_compares(_a: str, _b: str) -> int:
    return 0  # registered only to be removed at once (remove_collations)


class Refused(Exception):
    """Raised inside a wrapper: SQLite reports it as an error; the meter holds the reason."""


def _size(value: object) -> int:
    if value.__class__ is str:
        return len(value)  # type: ignore[arg-type]
    if value.__class__ is bytes:
        return len(value)  # type: ignore[arg-type]
    return 0 if value is None else 24  # a number's text form is at most this long


def cost_of(kind: str, args: tuple, base: int, per_step: int) -> int:
    """Steps charged for one call: the base, plus ``per_step`` input bytes a step; a search (LIKE,
    GLOB, instr, replace, trim) pays for every (text byte, pattern byte) pair it may compare, four
    pairs a step (a GLOB character class costs about that much per pair, measured).

    >>> cost_of("linear", ("abcd" * 64,), 100, 16), cost_of("product", ("%a%", "x" * 319), 100, 16)
    (116, 420)
    """
    if kind == PRODUCT and len(args) >= 2:
        return base + (_size(args[0]) + 1) * (_size(args[1]) + 1) * 4 // per_step
    return base + sum(_size(a) for a in args) // per_step


class Charges:
    """One guarded connection's link to the meter of the query it runs, and its value limits.

    ``meter`` is set by the caller for each run. It has ``charge(steps)`` (raises ``Refused`` once
    the budget is spent or the wall guard fires), ``refuse(kind, detail)`` and ``fail(exc)``
    (record why the query stops, then raise ``Refused``). Between runs it fails closed.
    """

    __slots__ = ("meter", "limits")

    def __init__(self, length: int, like_pattern: int) -> None:
        self.meter: object = UNMETERED
        self.limits = (length, like_pattern)


class _Unmetered:
    """No query is running: a wrapper called now fails closed."""

    def charge(self, steps: int) -> None:
        raise Refused("a charged function ran outside a metered query")

    def refuse(self, kind: str, detail: str) -> None:
        raise Refused(detail)

    def fail(self, exc: BaseException) -> None:
        raise Refused(str(exc))


UNMETERED = _Unmetered()


def _clock_word(args: tuple) -> str | None:
    for value in args:
        text = value.decode("latin-1") if value.__class__ is bytes else value
        if text.__class__ is str and text.strip().lower() in _CLOCK_WORDS:  # type: ignore[union-attr]
            return text  # type: ignore[return-value]
    return None


def _wrapper(charges: Charges, name: str, kind: str, base: int, per_step: int) -> Callable:
    texts: dict[int, str] = {}

    def call(*args: object) -> object:
        meter = charges.meter
        if kind == CLOCK:
            word = _clock_word(args) if args else "now"
            if word is not None:
                meter.refuse("forbidden", f"{name}() with {word!r} reads the clock or the local time zone, "  # type: ignore[attr-defined]
                                          "not the database")
        meter.charge(cost_of(kind, args, base, per_step))  # type: ignore[attr-defined]
        sql = texts.get(len(args))
        if sql is None:
            sql = texts[len(args)] = f"SELECT {name}({', '.join('?' * len(args))})"
        try:
            return side_connection(charges.limits).execute(sql, args).fetchone()[0]
        except (sqlite3.Error, ValueError, OverflowError, MemoryError) as exc:
            meter.fail(exc)  # type: ignore[attr-defined]
            raise  # not reached: fail() raises

    call.__name__ = f"charged_{name}"
    return call


def _refused_stub(*_args: object) -> None:
    raise Refused("refused function")  # never runs: the authorizer refuses the name first


def install(conn: sqlite3.Connection, base: int, per_step: int, length: int, like_pattern: int) -> Charges:
    """Register the charged wrappers and the refused stubs on ``conn``; return its Charges."""
    charges = Charges(length, like_pattern)
    for name, (arities, kind) in CHARGED.items():
        call = _wrapper(charges, name, kind, base, per_step)
        for nargs in arities:
            conn.create_function(name, nargs, call, deterministic=True)
    for name in REFUSED:
        conn.create_function(name, -1, _refused_stub)
    return charges


# ---- the side connection: SQLite's own functions, computed after the charge ----------------------

class _Side(threading.local):
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.by_limits: dict[tuple, sqlite3.Connection] = {}


_side = _Side()


def side_connection(limits: tuple[int, int]) -> sqlite3.Connection:
    """This thread's in-memory connection with these value limits (length, LIKE pattern)."""
    if _side.pid != os.getpid():  # a forked child opens its own
        _side.pid, _side.by_limits = os.getpid(), {}
    conn = _side.by_limits.get(limits)
    if conn is None:
        conn = sqlite3.connect(":memory:", isolation_level=None, cached_statements=64)
        set_limit(conn, LIMIT_LENGTH, limits[0], ":memory:")
        set_limit(conn, LIMIT_LIKE_PATTERN, limits[1], ":memory:")
        _side.by_limits[limits] = conn
    return conn


# ---- limits on every CPython the bundle supports -------------------------------------------------

class LimitUnavailable(Exception):
    """This Python cannot set SQLite's per-connection limits."""


_capi_lock = threading.Lock()
_capi: list = []


def _sqlite_capi() -> tuple:
    """(sqlite3_limit, sqlite3_db_filename) from the SQLite library Python's sqlite3 uses."""
    with _capi_lock:
        if not _capi:
            import _sqlite3  # the extension module: its library, or the one it links, holds the C API

            lib = ctypes.CDLL(_sqlite3.__file__)
            version = lib.sqlite3_libversion
            version.restype = ctypes.c_char_p
            if version().decode() != sqlite3.sqlite_version:
                raise LimitUnavailable(f"the SQLite C library ({version().decode()}) is not the one Python's "
                                       f"sqlite3 reports ({sqlite3.sqlite_version})")
            limit = lib.sqlite3_limit
            limit.restype, limit.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
            filename = lib.sqlite3_db_filename
            filename.restype, filename.argtypes = ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_char_p]
            _capi.append((limit, filename))
    return _capi[0]


def _handle(conn: sqlite3.Connection, path: str) -> int:
    """The ``sqlite3*`` of a CPython 3.9/3.10 connection: the first field after the object header.

    Checked before use: SQLite must name the file this connection opened (an empty name for
    ``:memory:``).
    """
    import sys

    if sys.implementation.name != "cpython" or sys.version_info[:2] not in ((3, 9), (3, 10)):
        raise LimitUnavailable(f"{sys.implementation.name} {sys.version.split()[0]} has no Connection.setlimit")
    handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
    if not handle:
        raise LimitUnavailable("the connection has no SQLite handle")
    named = (_sqlite_capi()[1](handle, b"main") or b"").decode("utf-8", "replace")
    same = named == "" if path == ":memory:" else os.path.realpath(named) == os.path.realpath(path)
    if not same:
        raise LimitUnavailable(f"the connection's SQLite handle names {named!r}, not {path!r}")
    return handle


def set_limit(conn: sqlite3.Connection, category: int, value: int, path: str) -> None:
    """``conn.setlimit`` where Python has it (3.11+); SQLite's C API through ctypes on 3.9/3.10."""
    if hasattr(conn, "setlimit"):
        conn.setlimit(category, int(value))
        return
    try:
        handle = _handle(conn, path)
        _sqlite_capi()[0](handle, category, int(value))
    except (OSError, AttributeError, ValueError) as exc:
        raise LimitUnavailable(f"cannot set SQLite limit {category}: {exc}") from None
