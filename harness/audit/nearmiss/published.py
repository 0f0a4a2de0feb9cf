"""Published systems' Spider dev predictions as near misses: real models' answers, measured like the families.

The near-miss families are written by someone; the wrong answers of published systems are not. A
prediction file holds one query a line in Spider dev order (``dev.json``; the format of
test-suite-sql-eval, HKUSTDial/NL2SQL360 and DAIL-SQL's results). Each line is read as a "near miss"
of its dev row's gold, its *family* the system (the file's name), so the near-miss measurement
(harness.audit.nearmiss.measure) scores every one the bundle's way and asks the oracle about those paid:
killed / (killed + missed) is the share of the real wrong answers the original accepts that the
bundle rejects. A prediction equal to its gold (whitespace and a final semicolon aside) is left out.

>>> import json, pathlib, tempfile
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "dev.json").write_text(json.dumps([{"db_id": "d", "query": "SELECT a FROM t"}]))
>>> _ = (folder / "sys_a.sql").write_text("SELECT a FROM t WHERE 1\\n")
>>> found = families(folder, [folder / "sys_a.sql"])
>>> [(m.family, m.sql) for m in found.generate("SELECT a FROM t", None)]
[('sys_a', 'SELECT a FROM t WHERE 1')]
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from harness.audit.nearmiss.families import NearMiss
from harness.audit.nearmiss.measure import Families
from harness.common.errors import InputError


def _normal(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").strip().lower()


def system_name(path: Path) -> str:
    """A prediction file's system name: its stem in letters, digits, '_', '-' and '.'."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem)


class Generator:
    """``near_misses(gold, database, *, families)`` over the predictions read (picklable: the
    near-miss measurement runs it in processes)."""

    def __init__(self, by_gold: dict[str, list[tuple[str, str]]]) -> None:
        self.by_gold = by_gold

    def __call__(self, gold: str, database: Path | None = None, *, families: Iterable[str] | None = None) -> list:
        wanted = None if families is None else set(families)
        out, seen = [], {_normal(gold)}
        for system, sql in self.by_gold.get(_normal(gold), []):
            if (wanted is None or system in wanted) and _normal(sql) not in seen:
                seen.add(_normal(sql))
                out.append(NearMiss(system, sql, f"{system}'s prediction"))
        return out


def families(spider: Path, files: list[Path]) -> Families:
    """The near-miss families of ``files`` (one system each) on the dev rows of ``spider/dev.json``."""
    try:
        dev = json.loads((spider / "dev.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {spider / 'dev.json'} ({exc}): give --spider the Spider folder") from None
    by_gold: dict[str, list[tuple[str, str]]] = {}
    names = []
    for path in files:
        name = system_name(path)
        if name in names:
            raise InputError(f"two prediction files are named {name!r}: rename one")
        names.append(name)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read predictions {path} ({exc})") from None
        if len(lines) < len(dev):
            raise InputError(f"{path} has {len(lines)} lines, dev.json {len(dev)} rows: one prediction a line, "
                             "in dev order (blank for none)")
        for row, line in zip(dev, lines):
            sql = line.split("\t")[0].strip()
            if sql:
                by_gold.setdefault(_normal(row["query"]), []).append((name, sql))
    return Families(Generator(by_gold), (), tuple(names), {n: f"{n}'s published dev predictions" for n in names},
                    tuple(names))
