"""The trainer's five-stage plan (pipeline.json): generated and validated.

Stages (the reference example): ``base-scored`` -> ``sft`` -> ``sft-scored`` -> ``rl`` ->
``rl-scored``. The shape follows the trainer's plan descriptor (``{"kind": "pipeline", "stages":
[...]}``; train stages hold ``config`` and ``execution``; ``@STAGE`` names an earlier stage's
output); README "Pipeline and submission" documents every field.

Validation, before anything is written or submitted:

* structure: unique stage names, known stage types, every ``@STAGE`` an earlier (train) stage;
* names: datasets, bundle, grader, workload and base model are the ones `submit` registers;
* data (the prepared folder's splits): how many passes GRPO makes over rl.jsonl (promptsPerStep x maxSteps / rows),
  and the longest row's token estimate against each train stage's maxSeqLength.

>>> doc = build_pipeline(PipelineParams())
>>> [s["name"] for s in doc["stages"]]
['base-scored', 'sft', 'sft-scored', 'rl', 'rl-scored']
>>> validate_structure(doc, DEFAULT_NAMES)
[]
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.common import prompts
from harness.common.errors import InputError
from harness.common.layout import PREPARE_HINT, SPLITS, Prepared
from harness.submit.names import DEFAULT_NAMES, REWARD_MODULE, Names

STAGE_TYPES = ("evaluate", "train")


@dataclasses.dataclass(frozen=True)
class PipelineParams:
    """Everything pipeline.json is generated from; the defaults are the reference example's."""

    names: Names = DEFAULT_NAMES
    eval_max_completion_tokens: int = 128
    sft_lora_rank: int = 16
    sft_learning_rate: float = 1e-4
    sft_epochs: int = 1
    sft_max_seq_length: int = prompts.SFT_MAX_TOKENS
    sft_precision: str = "bf16"
    sft_gpus: int = 1
    rl_max_steps: int = 40
    rl_prompts_per_step: int = 8
    rl_group_size: int = 8
    rl_kl_beta: float = 0.0
    rl_temperature: float = 1.0
    rl_max_completion_length: int = prompts.GRPO_COMPLETION_TOKENS
    rl_staleness_threshold: int = 0
    rl_lora_rank: int = 16
    rl_learning_rate: float = 1e-5
    rl_max_seq_length: int = prompts.GRPO_MAX_TOKENS
    rl_save_every: int = 4
    rl_keep_adapters: int = 10
    rl_micro_batch_sequences: int = 32
    rl_gpus: int = 1
    rl_rollout_gpus: int = 0


def _evaluate_stage(name: str, model: str, description: str, p: PipelineParams) -> dict:
    return {"name": name, "type": "evaluate", "description": description, "model": model,
            "dataset": p.names.datasets["eval"], "grader": p.names.pipeline_grader(),
            "maxCompletionTokens": p.eval_max_completion_tokens}


def _sft_stage(p: PipelineParams) -> dict:
    return {"name": "sft", "type": "train",
            "description": "Supervised LoRA tuning on the train split's gold queries: teaches the "
                           "answer format and common SQL patterns.",
            "config": {"method": "sft", "dataset": p.names.datasets["train"],
                       "lora": {"rank": p.sft_lora_rank}, "learningRate": p.sft_learning_rate,
                       "epochs": p.sft_epochs, "maxSeqLength": p.sft_max_seq_length,
                       "precision": p.sft_precision},
            "execution": {"gpus": p.sft_gpus}}


def _rl_stage(p: PipelineParams) -> dict:
    term = {"kind": "rule", "weight": 1.0, "bundle": p.names.bundle, "module": REWARD_MODULE}
    return {"name": "rl", "type": "train",
            "description": "GRPO from the SFT model on questions SFT never saw: the bundle's reward "
                           "runs every sampled query and pays 1.0 when it returns the gold's rows.",
            "config": {"method": "grpo", "dataset": p.names.datasets["rl"], "warmStartModelId": "@sft",
                       "maxSteps": p.rl_max_steps, "promptsPerStep": p.rl_prompts_per_step,
                       "groupSize": p.rl_group_size, "klBeta": p.rl_kl_beta,
                       "temperature": p.rl_temperature,
                       "maxCompletionLength": p.rl_max_completion_length,
                       "stalenessThreshold": p.rl_staleness_threshold,
                       "lora": {"rank": p.rl_lora_rank}, "learningRate": p.rl_learning_rate,
                       "maxSeqLength": p.rl_max_seq_length, "saveEvery": p.rl_save_every,
                       "keepAdapters": p.rl_keep_adapters,
                       "microBatchSequences": p.rl_micro_batch_sequences,
                       "reward": {"terms": [term]}},
            "execution": {"gpus": p.rl_gpus, "rolloutGpus": p.rl_rollout_gpus}}


def build_pipeline(p: PipelineParams) -> dict:
    """The pipeline descriptor for ``p``: a plain dict, written as pipeline.json."""
    n = p.names
    return {
        "kind": "pipeline",
        "name": f"{n.workload}-base-sft-grpo",
        "description": (f"Text-to-SQL on Spider with {n.base_model}: score the base model, tune it "
                        "with SFT, then with GRPO rewarded by running the query; every model is "
                        f"scored on {n.datasets['eval']} (unseen databases) by the same grader."),
        "workload": n.workload,
        "baseModel": n.base_model,
        "stages": [
            _evaluate_stage("base-scored", n.base_model, "Score the untuned base model on the eval "
                            "split: the baseline both tuned models are compared with.", p),
            _sft_stage(p),
            _evaluate_stage("sft-scored", "@sft", "Score the SFT model on the same split and "
                            "grader: what supervised tuning alone gains.", p),
            _rl_stage(p),
            _evaluate_stage("rl-scored", "@rl", "Score the GRPO model on the same split and "
                            "grader: what reinforcement adds on top of SFT.", p),
        ],
    }


def _references(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every ``@STAGE`` string inside ``value``, with the field path it sits at."""
    if isinstance(value, str) and value.startswith("@"):
        yield path, value[1:]
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _references(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _references(item, f"{path}[{i}]")


def _check_stage_names(stage: dict, label: str, names: Names) -> list[str]:
    """Datasets, grader, model and reward of one stage against what `submit` registers."""
    problems = []
    if stage.get("type") == "evaluate":
        if stage.get("dataset") != names.datasets["eval"]:
            problems.append(f"{label}: dataset {stage.get('dataset')!r} is not the eval dataset "
                            f"submit registers ({names.datasets['eval']!r})")
        if stage.get("grader") not in names.grader_specs():
            problems.append(f"{label}: grader {stage.get('grader')!r} is not bundle "
                            f"{names.bundle!r}'s grader ({names.pipeline_grader()!r})")
        model = stage.get("model")
        if not (isinstance(model, str) and (model.startswith("@") or model == names.base_model)):
            problems.append(f"{label}: model {model!r} is neither the base model "
                            f"{names.base_model!r} nor an @stage")
        return problems
    config: dict = stage["config"] if isinstance(stage.get("config"), dict) else {}
    train_sets = {names.datasets["train"], names.datasets["rl"]}
    if config.get("dataset") not in train_sets:
        problems.append(f"{label}: config.dataset {config.get('dataset')!r} is not one of the "
                        f"datasets submit registers ({', '.join(sorted(train_sets))})")
    reward = config.get("reward")
    terms = reward.get("terms") if isinstance(reward, dict) else None
    for i, term in enumerate(terms if isinstance(terms, list) else []):
        if isinstance(term, dict) and term.get("kind") == "rule" and (
                term.get("bundle") != names.bundle or term.get("module") != REWARD_MODULE):
            problems.append(f"{label}: reward term {i} names bundle {term.get('bundle')!r} module "
                            f"{term.get('module')!r}; submit pushes {names.bundle!r} (module "
                            f"{REWARD_MODULE!r})")
    return problems


def validate_structure(doc: Any, names: Names) -> list[str]:
    """Problems with the descriptor itself and its names (empty list: valid)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("stages"), list) or not doc["stages"]:
        return ["the descriptor must be a JSON object with a non-empty \"stages\" list"]
    problems = []
    if doc.get("kind") != "pipeline":
        problems.append(f"kind is {doc.get('kind')!r}; the trainer expects \"pipeline\"")
    for key, expected in (("baseModel", names.base_model), ("workload", names.workload)):
        if doc.get(key) != expected:
            problems.append(f"{key} is {doc.get(key)!r}; submit registers {expected!r}")
    seen: dict[str, str] = {}
    for i, stage in enumerate(doc["stages"]):
        name = stage.get("name") if isinstance(stage, dict) else None
        label = f"stage {i + 1} ({name or 'unnamed'})"
        if not isinstance(name, str) or not name or name in seen:
            problems.append(f"{label}: needs a unique, non-empty name")
            continue
        if stage.get("type") not in STAGE_TYPES:
            problems.append(f"{label}: type {stage.get('type')!r} is not one of {', '.join(STAGE_TYPES)}")
            continue
        for path, ref in _references(stage, name):
            if ref not in seen:
                problems.append(f"{label}: {path} refers to @{ref}, which is not an earlier stage")
            elif seen[ref] != "train":
                problems.append(f"{label}: {path} refers to @{ref}, an {seen[ref]} stage "
                                "with no model to use")
        problems += _check_stage_names(stage, label, names)
        seen[name] = stage["type"]
    return problems


def read_split(path: Path) -> list[tuple[int, list[dict]]]:
    """(line number, messages) for every row of a chat-JSONL split; InputError names file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:  # not UTF-8: not a split prepare wrote
        raise InputError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}; {PREPARE_HINT}, or pass "
                         "--skip-data-checks") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
            if not messages or not all(isinstance(m["content"], str) for m in messages):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise InputError(f"{path}:{number}: not a chat row (expected an object with a "
                             "non-empty \"messages\" list of {\"role\", \"content\"}); "
                             "regenerate the splits") from None
        rows.append((number, messages))
    return rows


# A row's token estimate, the same as prepare's summary (``harness.common.prompts``): ceil(chars / 3.5)
# per message + 4 chat-template tokens per message.
estimate_tokens = prompts.chat_tokens


def _prompt(messages: list[dict]) -> list[dict]:
    """The messages a model is given: all but the final assistant answer (the gold)."""
    return messages[:-1] if messages[-1].get("role") == "assistant" else messages


def _longest(rows: list[tuple[int, list[dict]]], prompt_only: bool) -> tuple[int, int]:
    """(token estimate, line number) of the longest row (its prompt only, or the whole chat)."""
    return max((estimate_tokens(_prompt(m) if prompt_only else m), n) for n, m in rows)


def _check_grpo(stage: dict, rows: list, file: str, notes: list[str], problems: list[str]) -> None:
    config = stage["config"]
    steps, per_step = config.get("maxSteps", 0), config.get("promptsPerStep", 0)
    used = steps * per_step
    passes = used / len(rows)
    detail = ("every prompt is used more than once" if passes > 1
              else f"{len(rows) - used} rows are never used" if passes < 1 else "each row once")
    notes.append(f"{stage['name']}: {steps} steps x {per_step} prompts per step = {used} prompts "
                 f"over {len(rows)} rows of {file}: {passes:.2f} passes ({detail})")
    completion = config.get("maxCompletionLength", 0)
    seq = config.get("maxSeqLength", 0)
    tokens, line = _longest(rows, prompt_only=True)
    notes.append(f"{stage['name']}: longest prompt ~{tokens} tokens ({file}:{line}) + "
                 f"maxCompletionLength {completion} vs maxSeqLength {seq}")
    if tokens + completion > seq:
        over = sum(1 for _, m in rows if estimate_tokens(_prompt(m)) + completion > seq)
        problems.append(f"{stage['name']}: {over} prompt(s) of {file} do not fit: the longest "
                        f"({file}:{line}, ~{tokens} tokens) plus maxCompletionLength {completion} "
                        f"needs maxSeqLength >= {tokens + completion}, not {seq}; raise "
                        "--rl-max-seq-length or leave long schemas out of the RL split")


def _check_sft(stage: dict, rows: list, file: str, notes: list[str], problems: list[str]) -> None:
    seq = stage["config"].get("maxSeqLength", 0)
    tokens, line = _longest(rows, prompt_only=False)
    notes.append(f"{stage['name']}: longest row ~{tokens} tokens with its answer ({file}:{line}) "
                 f"vs maxSeqLength {seq}")
    if tokens > seq:
        over = sum(1 for _, m in rows if estimate_tokens(m) > seq)
        problems.append(f"{stage['name']}: {over} row(s) of {file} are longer than maxSeqLength "
                        f"{seq} (the longest, {file}:{line}, ~{tokens} tokens) and would lose "
                        "their answer to truncation; raise --sft-max-seq-length or leave them out")


def check_data(doc: dict, data: Prepared, names: Names) -> tuple[list[str], list[str]]:
    """(notes, problems) from the prepared folder's splits against the train stages' settings."""
    split_of = {dataset: split for split, dataset in names.datasets.items()}
    cache: dict[str, list] = {}
    notes: list[str] = []
    problems: list[str] = []
    for split in SPLITS:  # submit registers all three: each must be there
        cache[split] = read_split(data.split(split))
        if not cache[split]:
            problems.append(f"{data.split(split)} has no rows; regenerate the splits")
    for stage in doc["stages"]:
        config = stage.get("config") if stage.get("type") == "train" else None
        if not isinstance(config, dict):
            continue
        used = split_of.get(str(config.get("dataset")))
        if used is None or not cache[used]:
            continue
        grpo = config.get("method") == "grpo"
        keys = ("maxSeqLength",) + (("maxSteps", "promptsPerStep", "maxCompletionLength") if grpo else ())
        bad = [k for k in keys if type(config.get(k)) is not int or config[k] < 0]
        if bad:  # a hand-edited file: say so rather than fail on arithmetic
            problems.append(f"{stage['name']}: config {', '.join(bad)} must be whole numbers >= 0")
            continue
        check = _check_grpo if grpo else _check_sft
        check(stage, cache[used], data.split(used).name, notes, problems)
    return notes, problems


def validate(doc: Any, names: Names, data: Prepared | None, *, lenient_lengths: bool = False) -> list[str]:
    """Validate a descriptor; return the notes to print, raise InputError listing every problem.

    ``data`` None skips the data checks. ``lenient_lengths`` turns "does not fit
    maxSeqLength" into a note (the estimate is rough; the trainer truncates rather than fails).
    """
    problems = validate_structure(doc, names)
    notes: list[str] = []
    if not problems and data is not None:
        notes, data_problems = check_data(doc, data, names)
        for problem in data_problems:
            if lenient_lengths and "maxSeqLength" in problem:
                notes.append("warning: " + problem)
            else:
                problems.append(problem)
    if problems:
        raise InputError("pipeline descriptor is not valid:\n  - " + "\n  - ".join(problems))
    return notes


def load(path: Path) -> Any:
    """Read a pipeline.json; InputError says how to get one."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}; write it with "
                         "`make pipeline` (python3 -m harness pipeline)") from None
    except ValueError as exc:
        raise InputError(f"{path} is not valid JSON ({exc}); regenerate it with `make pipeline`") from None


def dumps(doc: dict) -> bytes:
    """The file's bytes: indented for reading, key order as built, so rebuilding is byte-identical."""
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
