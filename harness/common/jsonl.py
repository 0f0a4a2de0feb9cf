"""Reading JSONL files (completions, eval splits, results) line by line. Standard library only: the
emulated trainer's runner imports it inside its container.

>>> from pathlib import Path
>>> path = Path("example.jsonl")
>>> _ = path.write_text('{"a": 1}\\n\\n"b"\\n', encoding="utf-8")
>>> list(read_jsonl(path, "example file"))
[(1, {'a': 1}), (3, 'b')]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from harness.common.errors import InputError


def read_jsonl(path: str | os.PathLike, what: str, advice: str = "") -> Iterator[tuple[int, object]]:
    """(line number from 1, parsed value) for every non-blank line of ``path``, parsed as it is reached.

    The file is read at once: InputError ``cannot read {what} {path}: ...`` when it cannot be. A line
    that does not parse is InputError ``{path}:{line}: not JSON (...){advice}`` when iteration reaches it.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc}") from None
    return _parsed_lines(text, path, advice)


def _parsed_lines(text: str, path: str | os.PathLike, advice: str) -> Iterator[tuple[int, object]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            raise InputError(f"{path}:{number}: not JSON ({exc}){advice}") from None
