"""The prepared folder (``--data DIR``, default ``out``): where each file of a run lives, and which
command makes it.

``prepare --output DIR`` writes the splits and the staged bundle; every other command reads that
folder through ``--data DIR`` and writes its own product there unless ``--output`` says otherwise:

| path under DIR | what | made by |
|---|---|---|
| ``data/train.jsonl``, ``data/rl.jsonl``, ``data/eval.jsonl`` | the three chat-JSONL splits | ``make bundle`` / ``make sample-bundle`` |
| ``bundle/`` | the staged bundle: ``bundle/**/*.py`` and ``data/`` | the same |
| ``prepare-summary.json`` | what prepare printed | the same |
| ``spider-scoring.zip`` | the bundle zip | ``make pack`` |
| ``pipeline.json`` | the trainer's plan | ``make pipeline`` |
| ``submission.json`` | the started pipeline's id and its inputs' SHA-256 | ``make submit`` |
| ``completions/<stage>.jsonl`` | a model's answers on the eval split | you (the trainer's export) |
| ``results/<stage>.jsonl`` | per-row results of a stage | ``make grade STAGE=<stage>`` |
| ``cache/search/`` | the counterexample search's databases, kept for the next stage (delete between runs) | the same |
| ``exports/<format>/<split>.jsonl`` | a split as TRL's or verl's dataset rows | ``python3 -m harness export --format trl`` |

A missing input is an InputError that names the command making it (``require``).

>>> Prepared(Path("out")).results("sft").as_posix()
'out/results/sft.jsonl'
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.common.errors import InputError

DEFAULT_DATA = Path("out")
SPLITS = ("train", "rl", "eval")
ZIP_NAME = "spider-scoring.zip"
PREPARE_HINT = ("prepare it first: `make bundle SPIDER_DATABASES=DIR` (Spider's database folder) or "
                "`make sample-bundle` (the embedded sample)")
GIVEN_COMPLETIONS = ("check the path given to --completions (COMPLETIONS= with make): a JSONL file of the "
                     "model's answers, one per eval row (docs/grading.md)")


@dataclasses.dataclass(frozen=True)
class Prepared:
    """The files of one prepared folder."""

    root: Path

    def split(self, name: str) -> Path:
        return self.root / "data" / f"{name}.jsonl"

    def splits(self) -> dict[str, Path]:
        return {name: self.split(name) for name in SPLITS}

    @property
    def staged(self) -> Path:
        return self.root / "bundle"

    @property
    def summary(self) -> Path:
        return self.root / "prepare-summary.json"

    @property
    def zip(self) -> Path:
        return self.root / ZIP_NAME

    @property
    def pipeline(self) -> Path:
        return self.root / "pipeline.json"

    @property
    def submission(self) -> Path:
        return self.root / "submission.json"

    def completions(self, stage: str) -> Path:
        return self.root / "completions" / f"{stage}.jsonl"

    def results(self, stage: str) -> Path:
        return self.root / "results" / f"{stage}.jsonl"

    def search_cache(self) -> Path:
        return self.root / "cache" / "search"

    def export(self, fmt: str, split: str) -> Path:
        return self.root / "exports" / fmt / f"{split}.jsonl"


def hint(path: Path, prepared: Prepared | None = None) -> str:
    """What makes ``path``: the command to run (or what to put there)."""
    name = path.name
    if name.endswith(".zip"):
        return "pack it: `make pack` (python3 -m harness pack)"
    if name == "pipeline.json":
        return "write it: `make pipeline` (python3 -m harness pipeline)"
    if path.parent.name == "completions":
        return ("put the model's answers to the eval split there (one per row, docs/grading.md), "
                "or pass --completions FILE")
    if path.parent.name == "results":
        return f"grade that stage first: `make grade STAGE={path.stem}`"
    return PREPARE_HINT


def require(path: Path, what: str, advice: str | None = None) -> Path:
    """``path`` when it is a file; InputError naming it, saying what is wrong and what to do (``advice``,
    by default the command that makes it).

    >>> _ = Path("answers").mkdir(), Path("answers/sft.jsonl").write_text("")
    >>> require(Path("answers"), "the sft completions")
    Traceback (most recent call last):
    ...
    harness.common.errors.InputError: the sft completions answers is a folder, not a file: give the file itself, e.g. answers/sft.jsonl
    """
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        files = [p for p in files if p.suffix in (".jsonl", ".zip")] or files  # the likely ones, if any
        example = f", e.g. {', '.join(str(p) for p in files[:3])}" if files else " (this folder holds none)"
        raise InputError(f"{what} {path} is a folder, not a file: give the file itself{example}")
    if not path.is_file():
        raise InputError(f"{what} {path} does not exist: {advice or hint(path)}")
    return path


def require_prepared(prepared: Prepared, *splits: str) -> Prepared:
    """The folder when the named splits are there (all three by default); InputError otherwise."""
    for name in splits or SPLITS:
        require(prepared.split(name), f"the {name} split")
    return prepared
