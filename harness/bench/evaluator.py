"""The official Spider evaluator's execution match, run from a checkout the user gives (never copied here).

``bench --evaluator DIR`` names a checkout of taoyds/test-suite-sql-eval (the evaluator Spider's and
the test suite's papers score with). Its ``exec_eval.eval_exec_match`` is imported from DIR into this
process and called as its own ``evaluation.py --etype exec`` calls it, with that script's defaults
(no value plugging, DISTINCT removed from both queries): the gold and the prediction each run on
every ``.sqlite`` file in the database's folder (in Spider's own folders, the one database), in a
new connection and event loop, and compared as bags of rows with column permutations. Its imports
(``sqlparse``, ``tqdm``) must be installed here.

    git clone https://github.com/taoyds/test-suite-sql-eval ~/test-suite-sql-eval
    python3 -m harness bench --spider DIR --only grader --evaluator ~/test-suite-sql-eval
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

from harness.common.errors import InputError

MODULES = ("exec_eval", "parse")  # exec_eval imports its sibling ``parse``; a ``parse`` of another origin would shadow it


class Evaluator:
    """``eval_exec_match`` of the checkout at ``folder``, with ``evaluation.py``'s defaults; 1 or 0."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder).resolve()
        self.module = load(self.folder)
        self.commit = _commit(self.folder)

    def __call__(self, database: Path, prediction: str, gold: str) -> int:
        return int(self.module.eval_exec_match(db=str(database), p_str=prediction, g_str=gold, plug_value=False,
                                               keep_distinct=False, progress_bar_for_each_datapoint=False))


def load(folder: Path) -> types.ModuleType:
    """``exec_eval`` imported from ``folder``; InputError saying what to give otherwise."""
    if not (folder / "exec_eval.py").is_file() or not (folder / "parse.py").is_file():
        raise InputError(f"--evaluator {folder}: no exec_eval.py and parse.py there; give a checkout of "
                         "https://github.com/taoyds/test-suite-sql-eval (git clone it outside this repository)")
    for name in MODULES:
        found = sys.modules.get(name)
        if found is not None and Path(getattr(found, "__file__", "") or "").resolve().parent != folder:
            raise InputError(f"--evaluator {folder}: a module {name!r} from {found.__file__} is already imported "
                             "in this process and would stand for the evaluator's own; run the bench in a fresh process")
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module("exec_eval")
    except ImportError as exc:
        raise InputError(f"--evaluator {folder}: importing its exec_eval failed ({exc}); install what it imports "
                         "(sqlparse, tqdm) into this Python") from None
    finally:
        sys.path.remove(str(folder))


def _commit(folder: Path) -> str | None:
    """The checkout's commit, read from its .git (None when it is not a git checkout)."""
    head = folder / ".git" / "HEAD"
    try:
        text = head.read_text(encoding="ascii").strip()
        if text.startswith("ref: "):
            return (folder / ".git" / text[5:]).read_text(encoding="ascii").strip()
        return text
    except OSError:
        return None
