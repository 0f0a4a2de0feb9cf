"""Spider's own question files as prepare's row source: offline, from the release's JSON.

Spider's download (spider.zip) holds, beside its ``database/`` folder, ``train_spider.json`` and
``dev.json``: JSON lists of questions, each an object with ``db_id``, ``question`` and ``query``
(and token lists and a parsed ``sql`` that prepare does not read). The datasets-server serves the
same files as ``xlangai/spider``: ``train_spider.json`` is its ``train`` split and ``dev.json`` its
``validation`` split, row for row in the files' order. So these rows, read here, are the rows the
API route reads, and a prepare from either gives the same splits when the two sources agree
(tests/test_prepare_offline.py proves it on the sample and on real Spider).

Each entry is checked as an API page is (harness.prepare.api_cache): a file that is not a JSON list,
or an entry without a non-empty text ``db_id``, ``question`` or ``query``, is an InputError naming the
file and the entry. Standard library only: prepare runs as a script.

>>> sorted(FILES.items())
[('train', 'train_spider.json'), ('validation', 'dev.json')]
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from harness.common.errors import InputError
from harness.common.jsonl import read_json_list
from harness.prepare.api_cache import ROW_FIELDS
from harness.prepare.fetch_rows import FetchStats

# The API's split name -> the file of Spider's release that holds it.
FILES = {"train": "train_spider.json", "validation": "dev.json"}


def beside(databases: Path) -> Path | None:
    """The folder of Spider's release around ``databases`` (its ``database/`` folder) when it holds
    both question files, else None: the layout of the unzipped spider.zip.

    >>> beside(Path("/nonexistent/spider/database")) is None
    True
    """
    folder = databases.resolve().parent
    return folder if all((folder / name).is_file() for name in FILES.values()) else None


def check_folder(folder: Path) -> Path:
    """``folder`` when it holds both files; InputError naming what is missing and where it comes from."""
    if not folder.is_dir():
        raise InputError(f"--questions {folder} is not a folder: give the folder of Spider's release that holds "
                         f"{' and '.join(FILES.values())} (the unzipped spider.zip, beside database/)")
    missing = [name for name in FILES.values() if not (folder / name).is_file()]
    if missing:
        raise InputError(f"--questions {folder} lacks {' and '.join(missing)}: give the folder of Spider's release "
                         "that holds both (the unzipped spider.zip), or leave --questions out to read the "
                         "questions from the datasets-server API")
    return folder


def _row(path: Path, i: int, entry: object) -> dict:
    if not isinstance(entry, dict):
        raise InputError(f"{path}: entry {i} is not an object: is this Spider's {path.name}?")
    for field in ROW_FIELDS:
        value = entry.get(field)
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{path}: entry {i} lacks a non-empty text field {field!r}: is this Spider's "
                             f"{path.name}? Replace it with the file from spider.zip")
    return {field: entry[field] for field in ROW_FIELDS}


def read_rows(path: Path) -> list[dict]:
    """Every question of one file, in order, as dicts of ROW_FIELDS."""
    data = read_json_list(path, "Spider's questions", f"is this Spider's {path.name}? Replace it with the file from "
                          "spider.zip")
    return [_row(path, i, entry) for i, entry in enumerate(data)]


class SpiderFiles:
    """The splits from Spider's files in ``folder``, in the API's split names (a RowSource).

    >>> SpiderFiles(Path("spider")).describe()
    "Spider's files spider/train_spider.json and spider/dev.json (no network)"
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.stats = FetchStats()

    def describe(self) -> str:
        """Where the questions come from, for the summary."""
        return (f"Spider's files {self.folder / FILES['train']} and {self.folder / FILES['validation']} "
                "(no network)")

    def rows(self, split: str) -> Iterator[dict]:
        name = FILES.get(split)
        if name is None:
            raise InputError(f"no Spider file for split {split!r}: give one of {sorted(FILES)}")
        rows = read_rows(self.folder / name)
        self.stats.files_read += 1
        yield from rows
