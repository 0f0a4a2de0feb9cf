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

    The file is read at once: InputError ``cannot read {what} {path}: ...`` when it cannot be, or is
    not UTF-8 (``read_utf8``). A line that does not parse is InputError ``{path}:{line}: not JSON
    (...){advice}`` when iteration reaches it.
    """
    return _parsed_lines(read_utf8(path, what), path, advice)


def read_json_list(path: Path, what: str, fix: str) -> list:
    """The JSON list a whole file holds (a question file); InputError naming ``what`` and the file,
    with ``fix`` (what to give instead) when it cannot be read, is not UTF-8 JSON or is not a list."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read ({exc}): {fix}") from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise InputError(f"{what} {path} is not UTF-8 JSON ({exc}): {fix}") from None
    if not isinstance(data, list):
        raise InputError(f"{what} {path} holds JSON {type(data).__name__}, not a list of questions: {fix}")
    return data


def read_utf8(path: str | os.PathLike, what: str) -> str:
    """The text of ``path``; InputError naming the file, and the line and byte, when it cannot be read
    or is not UTF-8 (JSON Lines files are UTF-8 by definition).

    >>> _ = Path("latin1.jsonl").write_bytes(b'"ok"\\n"caf\\xe9"\\n')
    >>> read_utf8("latin1.jsonl", "completions file")
    Traceback (most recent call last):
    ...
    harness.common.errors.InputError: latin1.jsonl:2: the completions file is not UTF-8 text (byte 0xe9 at offset 9): ...
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{path}:{line}: the {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}): save it as UTF-8 (e.g. iconv -f LATIN1 -t UTF-8 {path}), "
                         "then run the command again") from None


def _parsed_lines(text: str, path: str | os.PathLike, advice: str) -> Iterator[tuple[int, object]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            raise InputError(f"{path}:{number}: not JSON ({exc}){advice}") from None
