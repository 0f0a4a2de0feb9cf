"""The list of disputed Spider golds (fixtures/disputed-golds.json): read, validated, and applied.

A gold is *disputed* when it answers its question wrongly, or more narrowly than the question asks,
on a database that keeps the original's schema and invariants (docs/disputed-golds.md, generated
from the file by ``render_markdown``). Each entry names one gold on one database, the Spider rows
(split and index) it was read with, a kind from a closed vocabulary, a one-line reason and where
the dispute comes from (a published source, the project's labelled set, or reading by hand).

What prepare does with it (docs/preparing.md): every row whose (database, gold) an entry names is
marked in the bundle's index (``disputed``: the entry's id) and judged on the original database
only (no neighbour, no counterexample search: bundle/scoring/entry.py), and such rows are left out
of rl unless ``--keep-disputed``. A gold disputed for one of its questions is judged that way for
every row that uses it: the scorer cannot tell a row's question from its gold, and judging on the
original only never enforces a mistake.

Standard library only (prepare runs in a bare interpreter). A malformed file is an InputError that
names the entry and what to fix.

>>> found = load()
>>> found.match("pets_1", "SELECT weight FROM pets ORDER BY pet_age LIMIT 1").id
'pets_1-youngest-dog'
>>> found.match("pets_1", "SELECT count(*) FROM pets") is None
True
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from pathlib import Path

from bundle.scoring.index import normalize_gold
from harness.common.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PATH = ROOT / "fixtures" / "disputed-golds.json"
FORMAT = "spider-scoring-disputed-golds"
VERSION = 1
KINDS = ("missing condition", "wrong column", "wrong aggregate", "wrong bound", "wrong literal", "wrong direction",
         "wrong join", "wrong shape", "wrong grouping", "wrong quantifier", "text-typed numbers")
SOURCE_KINDS = ("published", "labelled set", "read by hand")
SPIDER_SPLITS = ("train", "dev")  # Spider's files: train_spider.json and dev.json (the API's train and validation)
API_SPLIT = {"train": "train", "validation": "dev"}  # prepare's row source -> Spider's file
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclasses.dataclass(frozen=True)
class SpiderRow:
    """A Spider question the gold was read with: ``split`` train or dev, ``index`` its row in that file."""

    split: str
    index: int
    question: str


@dataclasses.dataclass(frozen=True)
class Source:
    kind: str  # one of SOURCE_KINDS
    detail: str
    url: str | None = None  # published sources
    pairs: tuple[str, ...] = ()  # labelled-set pair ids


@dataclasses.dataclass(frozen=True)
class DisputedGold:
    id: str
    db_id: str
    gold: str
    kind: str
    reason: str
    source: Source
    rows: tuple[SpiderRow, ...]
    right_answer: str | None = None  # a query that answers the question (optional)
    other_readings: tuple[str, ...] = ()  # queries answering another fair reading of it, accepted too

    @property
    def key(self) -> tuple[str, str]:
        return self.db_id, normalize_gold(self.gold)

    def summary(self) -> dict:
        """What the bundle's index keeps of it (``disputed_golds``): the verdict's explanation cites it,
        and the bundle judges the row against the gold and each ``accepted`` answer."""
        found: dict = {"kind": self.kind, "reason": self.reason}
        if self.right_answer:
            found["accepted"] = [self.right_answer, *self.other_readings]
        return found


@dataclasses.dataclass(frozen=True)
class DisputedList:
    """The validated file: its entries in file order, looked up by (db_id, normalized gold)."""

    path: Path
    golds: tuple[DisputedGold, ...]
    title: str = ""
    compiled: str = ""
    rule: str = ""
    kinds: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_key", {g.key: g for g in self.golds})

    def match(self, db_id: str, gold: str) -> DisputedGold | None:
        """The entry disputing ``gold`` on ``db_id`` (whitespace and a trailing ``;`` aside), or None."""
        return self._by_key.get((db_id, normalize_gold(gold)))  # type: ignore[attr-defined]

    def ids(self) -> dict[tuple[str, str], str]:
        """(db_id, normalized gold) -> the entry's id: what selection and the index need."""
        return {g.key: g.id for g in self.golds}

    def summaries(self, ids: Iterable[str]) -> dict[str, dict]:
        """id -> ``DisputedGold.summary`` for ``ids`` (the entries a bundle uses), sorted by id."""
        wanted = set(ids)
        return {g.id: g.summary() for g in sorted(self.golds, key=lambda g: g.id) if g.id in wanted}


EMPTY = DisputedList(Path("-"), ())


def load(path: str | Path = DEFAULT_PATH) -> DisputedList:
    """The disputed golds of ``path``, validated (InputError naming the entry and the problem)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"cannot read the disputed golds {path}: {exc}; give a JSON file in the format of "
                         f"{DEFAULT_PATH.relative_to(ROOT)}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise InputError(f"{path} is not a {FORMAT} file of version {VERSION}: start from "
                         f"{DEFAULT_PATH.relative_to(ROOT)}")
    items = data.get("golds")
    if not isinstance(items, list):
        raise InputError(f"{path} has no 'golds' list: add one (it may be empty)")
    golds: list[DisputedGold] = []
    for position, item in enumerate(items):
        golds.append(_entry(item, position, path, golds))
    kinds = data.get("kinds") or {}
    return DisputedList(path, tuple(golds), str(data.get("title", "")), str(data.get("compiled", "")),
                        str(data.get("rule", "")), tuple((k, str(kinds[k])) for k in KINDS if k in kinds))


def _entry(item: object, position: int, path: Path, before: list[DisputedGold]) -> DisputedGold:
    """One validated entry of the file."""
    name = item.get("id") if isinstance(item, dict) and isinstance(item.get("id"), str) else f"#{position}"

    def bad(problem: str) -> InputError:
        return InputError(f"disputed golds {path}: entry {name!r}: {problem}; fix that entry "
                          "(docs/disputed-golds.md describes the fields)")

    if not isinstance(item, dict):
        raise bad("not an object")
    for field in ("id", "db_id", "gold", "kind", "reason"):
        if not isinstance(item.get(field), str) or not item[field].strip():
            raise bad(f"{field!r} must be non-empty text")
    if not _ID.fullmatch(item["id"]):
        raise bad("the id must be letters, digits, '_', '.' or '-' (it is shown in verdicts)")
    if any(g.id == item["id"] for g in before):
        raise bad("the id repeats")
    if item["kind"] not in KINDS:
        raise bad(f"kind {item['kind']!r} is none of {', '.join(KINDS)}")
    if "\n" in item["reason"]:
        raise bad("the reason must be one line")
    right = item.get("right_answer")
    if right is not None and (not isinstance(right, str) or not right.strip()):
        raise bad("'right_answer', when given, must be a query")
    others = item.get("other_readings", [])
    if not isinstance(others, list) or not all(isinstance(o, str) and o.strip() for o in others):
        raise bad("'other_readings', when given, must be a list of queries")
    if others and right is None:
        raise bad("'other_readings' needs a 'right_answer' first")
    entry = DisputedGold(item["id"], item["db_id"], item["gold"], item["kind"], item["reason"],
                         _source(item.get("source"), bad), _rows(item.get("rows"), bad), right, tuple(others))
    clash = next((g for g in before if g.key == entry.key), None)
    if clash is not None:
        raise bad(f"entry {clash.id!r} disputes the same gold on {entry.db_id}: merge the two")
    return entry


def _source(value: object, bad) -> Source:
    if not isinstance(value, dict) or value.get("kind") not in SOURCE_KINDS:
        raise bad(f"'source' must be an object whose kind is one of {', '.join(SOURCE_KINDS)}")
    detail, url, pairs = value.get("detail"), value.get("url"), value.get("pairs", [])
    if not isinstance(detail, str) or not detail.strip():
        raise bad("the source needs a 'detail': what it says, or the reasoning when read by hand")
    if value["kind"] == "published" and not (isinstance(url, str) and url.startswith("https://")):
        raise bad("a published source needs its 'url' (https://...)")
    if value["kind"] == "labelled set" and (not isinstance(pairs, list) or not pairs
                                            or not all(isinstance(p, str) and p for p in pairs)):
        raise bad("a labelled-set source needs 'pairs': the ids of its pairs in fixtures/labels/")
    return Source(value["kind"], detail, url if isinstance(url, str) else None, tuple(pairs or ()))


def _rows(value: object, bad) -> tuple[SpiderRow, ...]:
    if not isinstance(value, list) or not value:
        raise bad("'rows' must list the Spider rows (split, index, question) the gold was read with")
    out = []
    for row in value:
        if (not isinstance(row, dict) or row.get("split") not in SPIDER_SPLITS or not isinstance(row.get("index"), int)
                or isinstance(row.get("index"), bool) or row["index"] < 0
                or not isinstance(row.get("question"), str) or not row["question"].strip()):
            raise bad(f"each row needs a split ({' or '.join(SPIDER_SPLITS)}), an index (0 or more) and its question")
        out.append(SpiderRow(row["split"], row["index"], row["question"]))
    return tuple(out)
