"""Every limit and setting of the scorer, in one table.

Calibrated on the real Spider golds (see README, "Limits"): the slowest gold query on the shipped
databases takes about 0.5 s, the largest result is 20,662 rows and the longest stored value 213
bytes, so no real gold comes near a cap. ``max_cell_bytes`` is kept small on purpose: string
functions such as instr() and replace() cost (length x length) inside one VM step, out of the
deadline's reach; at 100 kB their worst case is about 20 ms, at 1 MB about 2 s. The same holds for the
final in-memory sort of a huge ORDER BY or GROUP BY (a sort cannot spill to disk here): only the heap
ceiling bounds it; at 256 MiB the worst measured step is about 3 s past the deadline.
A query over a limit gets its own outcome (``prediction_timeout`` or ``prediction_over_cap``);
it is never compared on a partial result.

>>> DEFAULT_LIMITS.timeout_s
2.0
>>> DEFAULT_LIMITS.replace(timeout_s=0.5).timeout_s
0.5
"""

from __future__ import annotations

import dataclasses
import os

# One row per setting: name, default, unit, meaning. README's limits table is checked against it.
SETTINGS = (
    ("timeout_s", 2.0, "s", "wall-clock deadline for a predicted query, fetch included"),
    ("gold_timeout_s", 20.0, "s", "deadline for a gold query (computed once, then cached)"),
    ("max_rows", 100_000, "rows", "rows fetched before the result counts as over the cap"),
    ("max_cell_bytes", 100_000, "bytes", "largest string or blob a query may build (SQLITE_LIMIT_LENGTH)"),
    ("max_result_bytes", 64_000_000, "bytes", "estimated size of a whole fetched result"),
    ("max_sql_chars", 20_000, "chars", "longest query text executed"),
    ("max_completion_chars", 200_000, "chars", "longest model output read by the extractor"),
    ("compare_timeout_s", 1.0, "s", "deadline for matching columns and rows of two results"),
    ("compare_max_nodes", 20_000, "nodes", "search steps when several column mappings are possible"),
    ("heap_limit_bytes", 268_435_456, "bytes", "process-wide SQLite heap ceiling (PRAGMA hard_heap_limit)"),
    ("cache_pages_kib", 2_048, "KiB", "page cache per connection (PRAGMA cache_size)"),
    ("progress_steps", 1_000, "VM steps", "how often the deadline is checked inside SQLite"),
    ("float_digits", 12, "digits", "significant digits numbers are rounded to before comparison"),
)


@dataclasses.dataclass(frozen=True)
class Limits:
    """The scorer's limits; build variants with ``replace`` (instances are immutable)."""

    timeout_s: float = 2.0
    gold_timeout_s: float = 20.0
    max_rows: int = 100_000
    max_cell_bytes: int = 100_000
    max_result_bytes: int = 64_000_000
    max_sql_chars: int = 20_000
    max_completion_chars: int = 200_000
    compare_timeout_s: float = 1.0
    compare_max_nodes: int = 20_000
    heap_limit_bytes: int = 268_435_456
    cache_pages_kib: int = 2_048
    progress_steps: int = 1_000
    float_digits: int = 12

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"limit {field.name} must be a positive number, got {value!r}")

    def replace(self, **changes: float) -> "Limits":
        return dataclasses.replace(self, **changes)


def limits_from_env(environ: "os._Environ[str] | dict[str, str] | None" = None) -> Limits:
    """Limits with overrides from ``SPIDER_SCORING_<NAME>`` variables (e.g. SPIDER_SCORING_TIMEOUT_S).

    >>> limits_from_env({"SPIDER_SCORING_MAX_ROWS": "50"}).max_rows
    50
    """
    environ = os.environ if environ is None else environ
    changes = {}
    for name, default, _unit, _meaning in SETTINGS:
        raw = environ.get("SPIDER_SCORING_" + name.upper())
        if raw is None:
            continue
        try:
            changes[name] = type(default)(float(raw)) if isinstance(default, int) else float(raw)
        except ValueError:
            raise ValueError(
                f"SPIDER_SCORING_{name.upper()}={raw!r} is not a number; unset it or give a {_unit} value"
            ) from None
    return Limits(**changes)


DEFAULT_LIMITS = Limits()
