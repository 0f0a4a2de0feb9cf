"""A training run's reward log, read into (step, mean reward) pairs for the trend beside the evaluation.

Four shapes, told apart by the file's name and first bytes (docs/grading.md, "The reward curve"):

* **TRL** ``trainer_state.json`` (a ``.json`` file): ``log_history``, a list of objects with
  ``step`` and, for GRPOTrainer, ``reward`` (the weighted mean over the logged steps' completions;
  ``rewards/<function>/mean`` per reward function). Entries without the key (the run's summary, an
  evaluation's ``eval_*``) and ``null`` values (no completion scored) are skipped.
* **verl's file logger** (``trainer.logger=['file']``, a JSONL file): one ``{"step": N, "data":
  {metric: value}}`` per step. The key is ``critic/score/mean`` (the reward function's own score)
  or, when absent, ``critic/rewards/mean`` (the score after any KL penalty folded into the reward).
* **verl's console logger** (the trainer's captured output): lines ``step:N - metric:value - ...``;
  other lines are ignored, a Ray prefix such as ``(TaskRunner pid=7)`` too.
* **plain**: a CSV with a header naming ``step`` and ``reward``, or JSONL of ``{"step": N,
  "reward": x}``.

``key`` overrides the metric read. A missing value or NaN is skipped and counted; anything else that
is not a number stops the read with :class:`RewardLogError`, naming the file and the line (or the
``log_history`` entry) and what to do.

>>> curve = parse_text("step,reward\\n1,0.20\\n2,0.25\\n3,\\n", "run.csv")
>>> curve.source, curve.steps, curve.rewards, curve.skipped
('CSV', (1.0, 2.0), (0.2, 0.25), 1)
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

from harness.common.errors import InputError

TRL_KEYS = ("reward",)
VERL_KEYS = ("critic/score/mean", "critic/rewards/mean")
PLAIN_KEYS = ("reward",)
CONSOLE_LINE = re.compile(r"(?:^|\s)step:(\d+) - (.*)$")
NUMPY_SCALAR = re.compile(r"^np\.(?:float|int)\d*\((.*)\)$")  # verl prints numpy scalars by repr


class RewardLogError(InputError):
    """A reward log that cannot be read: the message names the file, the line and the fix."""


@dataclasses.dataclass(frozen=True)
class RewardCurve:
    """The (step, reward) pairs of one log, sorted by step."""

    path: str
    source: str  # "TRL trainer_state.json", "verl file logger", "verl console", "CSV", "JSONL"
    key: str
    steps: tuple[float, ...]
    rewards: tuple[float, ...]
    skipped: int  # entries of the log without a value for the key (or a null or NaN one)


def read_reward_log(path: str | Path, key: str | None = None) -> RewardCurve:
    """The reward curve in the file at ``path`` (RewardLogError when it is missing or malformed)."""
    path = Path(path)
    if not path.is_file():
        raise RewardLogError(f"the reward log {path} does not exist: give the run's trainer_state.json (TRL), "
                             "verl's metrics (file or console logger) or a CSV/JSONL of step and reward")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise RewardLogError(f"{path} line {line}: byte {exc.start} is not UTF-8; save the log as UTF-8") from None
    return parse_text(text, str(path), key)


def parse_text(text: str, name: str, key: str | None = None) -> RewardCurve:
    """Read ``text`` (the content of the file ``name``) in the shape its name and first bytes show."""
    if not text.strip():
        raise RewardLogError(f"{name} is empty: a reward log needs one value per logged step")
    suffix = Path(name).suffix.lower()
    first = text.lstrip()[:1]
    if suffix == ".json" or (first == "{" and suffix not in (".jsonl", ".csv") and _whole_json(text)):
        return _trl(text, name, key)
    if first == "{":
        return _jsonl(text, name, key)
    if any(CONSOLE_LINE.search(line) for line in text.splitlines()):
        return _console(text, name, key)
    return _csv(text, name, key)


def _whole_json(text: str) -> bool:
    """Whether ``text`` is one JSON object holding ``log_history`` (TRL's state under another name)."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and "log_history" in value


class _Collector:
    """Pairs gathered from a log with the key chosen among the candidates, then the curve."""

    def __init__(self, name: str, source: str, candidates: tuple[str, ...]) -> None:
        self.name, self.source, self.candidates = name, source, candidates
        self.pairs: list[tuple[float, float]] = []
        self.skipped = 0

    def choose(self, seen: set[str]) -> str:
        for candidate in self.candidates:
            if candidate in seen:
                return candidate
        metrics = ", ".join(sorted(k for k in seen if "reward" in k or "score" in k)[:8]) or "none"
        raise RewardLogError(f"{self.name} ({self.source}) has no {' or '.join(self.candidates)}: name the metric "
                             f"with --reward-key (reward-like metrics in the log: {metrics})")

    def add(self, where: str, step: object, value: object) -> None:
        """One entry's step and value; ``where`` is its line or entry for an error."""
        number = _number(value, where, self.name, "the reward")
        if number is None or math.isnan(number):
            self.skipped += 1
            return
        if math.isinf(number):
            raise RewardLogError(f"{self.name} {where}: the reward is {value!r}, not a finite number; "
                                 "fix or remove that entry")
        stepped = _number(step, where, self.name, "the step")
        if stepped is None or not math.isfinite(stepped):
            raise RewardLogError(f"{self.name} {where}: no step number (got {step!r}); every entry needs its step")
        self.pairs.append((stepped, number))

    def curve(self, key: str) -> RewardCurve:
        if not self.pairs:
            raise RewardLogError(f"{self.name} ({self.source}) holds no value of {key!r}: "
                                 "check that it is the training run's log, or name the metric with --reward-key")
        pairs = sorted(self.pairs, key=lambda p: p[0])
        return RewardCurve(self.name, self.source, key, tuple(p[0] for p in pairs), tuple(p[1] for p in pairs),
                           self.skipped)


def _number(value: object, where: str, name: str, what: str) -> float | None:
    """A JSON or text value as a float; None for null or an empty cell."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise RewardLogError(f"{name} {where}: {what} is {value!r}, not a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        match = NUMPY_SCALAR.match(text)
        try:
            return float(match.group(1) if match else text)
        except ValueError:
            pass
    raise RewardLogError(f"{name} {where}: {what} is {value!r}, not a number; fix that entry or give another --reward-key")


def _trl(text: str, name: str, key: str | None) -> RewardCurve:
    try:
        state = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RewardLogError(f"{name} line {exc.lineno}: not valid JSON ({exc.msg}); give TRL's whole "
                             "trainer_state.json (a run's checkpoint folder holds it)") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise RewardLogError(f"{name}: a .json reward log must be TRL's trainer_state.json, with a log_history "
                             "list; for another log give a .jsonl or .csv file")
    collector = _Collector(name, "TRL trainer_state.json", (key,) if key else TRL_KEYS)
    entries = []
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            raise RewardLogError(f"{name} log_history entry {i}: {entry!r} is not an object")
        entries.append(entry)
    chosen = collector.choose({k for e in entries for k in e})
    for i, entry in enumerate(entries):
        if chosen in entry:
            collector.add(f"log_history entry {i} (step {entry.get('step')})", entry.get("step"), entry[chosen])
        else:
            collector.skipped += 1
    return collector.curve(chosen)


def _json_lines(text: str, name: str) -> Iterator[tuple[int, dict]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RewardLogError(f"{name} line {number}: not valid JSON ({exc.msg}); every line of a JSONL reward "
                                 "log is one object") from None
        if not isinstance(value, dict):
            raise RewardLogError(f"{name} line {number}: {line.strip()[:60]!r} is not a JSON object")
        yield number, value


def _jsonl(text: str, name: str, key: str | None) -> RewardCurve:
    lines = list(_json_lines(text, name))
    verl = isinstance(lines[0][1].get("data"), dict)
    if verl:
        for number, value in lines:
            if not isinstance(value.get("data"), dict):
                raise RewardLogError(f"{name} line {number}: no \"data\" object; verl's file logger writes "
                                     '{"step": N, "data": {...}} on every line')
        lines = [(n, {"step": v.get("step"), **v["data"]}) for n, v in lines]
    collector = _Collector(name, "verl file logger" if verl else "JSONL",
                           (key,) if key else VERL_KEYS if verl else PLAIN_KEYS)
    chosen = collector.choose({k for _, v in lines for k in v})
    for number, value in lines:
        if chosen in value:
            collector.add(f"line {number}", value.get("step"), value[chosen])
        else:
            collector.skipped += 1
    return collector.curve(chosen)


def _console(text: str, name: str, key: str | None) -> RewardCurve:
    lines = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = CONSOLE_LINE.search(line)
        if match:
            metrics = dict(part.rpartition(":")[::2] for part in match.group(2).split(" - "))
            lines.append((number, match.group(1), metrics))
    collector = _Collector(name, "verl console", (key,) if key else VERL_KEYS)
    chosen = collector.choose({k for _, _, metrics in lines for k in metrics})
    for number, step, metrics in lines:
        if chosen in metrics:
            collector.add(f"line {number}", step, metrics[chosen])
        else:
            collector.skipped += 1
    return collector.curve(chosen)


def _csv(text: str, name: str, key: str | None) -> RewardCurve:
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in reader.fieldnames or []]
    chosen = key or PLAIN_KEYS[0]
    if "step" not in header or chosen not in header:
        raise RewardLogError(f"{name} line 1: a CSV reward log needs a header naming step and {chosen} "
                             f"(got {', '.join(header) or 'nothing'}); or give TRL's trainer_state.json or verl's metrics")
    collector = _Collector(name, "CSV", (chosen,))
    reader.fieldnames = header
    for row in reader:
        if None in row:  # more cells than the header names
            raise RewardLogError(f"{name} line {reader.line_num}: more cells than the header's {len(header)}")
        collector.add(f"line {reader.line_num}", row.get("step"), row.get(chosen))
    return collector.curve(chosen)


def assign_reward_logs(values: list[str], labels: list[str], baseline: str) -> list[tuple[str, str]]:
    """``--reward-log`` values (each ``STAGE=FILE`` or ``FILE``, several joined by commas) as
    (stage, file) pairs. A bare FILE belongs to the one stage other than the baseline.

    >>> assign_reward_logs(["rl=out/rl.jsonl,grpo=trainer_state.json"], ["sft", "rl", "grpo"], "sft")
    [('rl', 'out/rl.jsonl'), ('grpo', 'trainer_state.json')]
    >>> assign_reward_logs(["run.csv"], ["base", "tuned"], "base")
    [('tuned', 'run.csv')]
    """
    pairs = []
    for item in (part.strip() for value in values for part in value.split(",")):
        if not item:
            continue
        label, sep, path = item.partition("=")
        if sep and not Path(item).is_file():
            if not label.strip() or not path.strip():
                raise InputError(f"--reward-log {item!r}: give STAGE=FILE (e.g. rl=out/trainer_state.json) or FILE")
            if label.strip() not in labels:
                raise InputError(f"--reward-log {item}: {label.strip()!r} is not one of the stages ({', '.join(labels)})")
            pairs.append((label.strip(), path.strip()))
            continue
        others = [x for x in labels if x != baseline]
        if len(others) != 1:
            raise InputError(f"--reward-log {item}: say which stage's run logged it, as STAGE=FILE "
                             f"(stages besides the baseline: {', '.join(others)})")
        pairs.append((others[0], item))
    return pairs
