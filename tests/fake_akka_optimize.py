#!/usr/bin/env python3
"""A stand-in for the `akka-optimize` CLI, for tests: records every call, answers like the docs.

Tests put a small ``akka-optimize`` wrapper running this script first on PATH. Behaviour follows
the documented first-generation CLI (../shared/docs/trainer-contract.md): ``-o json`` prints
JSON, ``--jq`` filters it (simple paths such as ``.pipelineId`` or ``.stages[0].state``),
``training workloads create`` of an existing name fails, ``pipelines wait --exit-status`` exits
non-zero on FAILED or CANCELLED, and an unknown command or flag is refused as the real one would.

Environment:

* ``FAKE_AKKA_DIR`` (required): holds ``calls.jsonl`` (one ``{"argv", "env"}`` per call) and
  ``state.json`` (base models, datasets, bundles, workloads, pipelines);
* ``FAKE_AKKA_LOGGED_OUT=1``: every command fails as when no one is logged in;
* ``FAKE_AKKA_PIPELINE_OUTCOME=FAILED|CANCELLED``: pipelines started from now on end that way;
* ``FAKE_AKKA_FAIL="datasets create"``: commands starting with these words fail (exit 1);
* ``FAKE_AKKA_HANG="training base-models select"``: commands starting with these words hang.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
import zipfile
from pathlib import Path

VALUE_FLAGS = {"-o", "--output", "--jq", "-f", "--file", "--name", "--dataset", "--grader",
               "--context", "--timeout", "--config"}
BOOL_FLAGS = {"--wait", "--exit-status", "--force", "--dry-run", "--disable-prompt"}


class Refused(Exception):
    """The command fails: message on stderr, exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def parse(argv: list[str]) -> tuple[list[str], dict[str, object]]:
    words: list[str] = []
    flags: dict[str, object] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in VALUE_FLAGS:
            if i + 1 >= len(argv):
                raise Refused(f"Error: flag needs an argument: {arg}", 2)
            flags[arg.lstrip("-")], i = argv[i + 1], i + 2
            continue
        if arg in BOOL_FLAGS:
            flags[arg.lstrip("-")] = True
        elif arg.startswith("-"):
            raise Refused(f"Error: unknown flag: {arg}", 2)
        else:
            words.append(arg)
        i += 1
    for short, long in (("o", "output"), ("f", "file")):
        if short in flags:
            flags[long] = flags.pop(short)
    return words, flags


def jq(value: object, path: str) -> object:
    """The subset of jq the tests need: ``.``, ``.key``, ``.key[0].other``."""
    if path == ".":
        return value
    for key, index in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", path):
        value = value[key] if key else value[int(index)]  # type: ignore[index]
    return value


def emit(data: dict, text: str, flags: dict) -> None:
    """Print ``data`` as the requested output format (text by default, as the real CLI)."""
    if "jq" in flags:
        picked = jq(data, str(flags["jq"]))
        print(picked if isinstance(picked, str) else json.dumps(picked))
    elif flags.get("output") == "json":
        print(json.dumps(data, indent=2))
    elif flags.get("output") == "json-compact":
        print(json.dumps(data, separators=(",", ":")))
    else:
        print(text)


def arg(words: list[str], n: int, what: str) -> str:
    if len(words) <= n:
        raise Refused(f"Error: accepts 1 arg(s), received 0 ({what} missing)", 2)
    return words[n]


def need(flags: dict, name: str) -> str:
    if name not in flags:
        raise Refused(f"Error: required flag(s) \"{name}\" not set", 2)
    return str(flags[name])


def create_dataset(state: dict, words: list, flags: dict) -> None:
    path, name = Path(need(flags, "file")), need(flags, "name")
    if not path.is_file():
        raise Refused(f"Error: open {path}: no such file or directory")
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            if line.strip() and not json.loads(line)["messages"]:
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise Refused(f"Error: {path}:{number}: not a chat row") from None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    created = state["datasets"].get(name) != digest
    state["datasets"][name] = digest
    emit({"name": name, "hash": digest, "created": created},
         f"dataset {name}: {digest} ({'created' if created else 'unchanged'})", flags)


def push_bundle(state: dict, words: list, flags: dict) -> None:
    path, name = Path(arg(words, 3, "PATH")), need(flags, "name")
    if not path.is_file() or not zipfile.is_zipfile(path):
        raise Refused(f"Error: {path} is not a zip file or directory")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    state["bundles"][name] = digest
    emit({"name": name, "hash": digest}, f"bundle {name} -> {digest}", flags)


def workload(state: dict, words: list, flags: dict) -> None:
    verb, name = words[2], arg(words, 3, "WORKLOAD")
    exists = name in state["workloads"]
    if verb == "get":
        if not exists:
            raise Refused(f"Error: workload {name} not found")
    elif verb == "create":
        if exists:
            raise Refused(f"Error: workload {name} already exists")
        state["workloads"][name] = {"name": name, "evaluation": None}
    else:  # set-evaluation
        if not exists:
            raise Refused(f"Error: workload {name} not found")
        dataset = need(flags, "dataset")
        if dataset not in state["datasets"]:
            raise Refused(f"Error: dataset {dataset} not found")
        state["workloads"][name]["evaluation"] = {"dataset": dataset, "grader": flags.get("grader")}
    emit(state["workloads"][name], f"workload {name}", flags)


def start_pipeline(state: dict, words: list, flags: dict) -> None:
    path = Path(need(flags, "file"))
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Refused(f"Error: cannot read plan {path}: {exc}") from None
    if plan.get("kind") != "pipeline":
        raise Refused("Error: plan kind must be \"pipeline\"")
    for stage in plan.get("stages", []):
        dataset = stage.get("dataset") or (stage.get("config") or {}).get("dataset")
        if dataset not in state["datasets"]:
            raise Refused(f"Error: stage {stage.get('name')}: unknown dataset {dataset}")
    if not flags.get("force") and not flags.get("dry-run") and not sys.stdin.isatty():
        raise Refused("Error: confirmation required and prompts are disabled; pass --force")
    number = len(state["pipelines"]) + 1
    pipeline_id = hashlib.sha256(f"pipeline-{number}".encode()).hexdigest()[:16]
    outcome = os.environ.get("FAKE_AKKA_PIPELINE_OUTCOME", "COMPLETED")
    state["pipelines"][pipeline_id] = {"pipelineId": pipeline_id, "state": outcome,
                                       "stages": [s["name"] for s in plan["stages"]]}
    emit({"pipelineId": pipeline_id, "state": "RUNNING"}, f"pipeline {pipeline_id} started", flags)


def pipeline_view(record: dict) -> dict:
    """Stage by stage: everything COMPLETED up to the failing stage (the last train stage)."""
    stages, final = record["stages"], record["state"]
    failing = len(stages) - 2 if final != "COMPLETED" else len(stages)
    view = [{"name": name, "state": "COMPLETED" if i < failing else final if i == failing else "PENDING",
             "meanScore": 0.5 if i < failing else None} for i, name in enumerate(stages)]
    return {"pipelineId": record["pipelineId"], "state": final, "stages": view}


def pipeline_command(state: dict, words: list, flags: dict) -> None:
    verb, pipeline_id = words[2], arg(words, 3, "PIPELINE")
    if pipeline_id not in state["pipelines"]:
        raise Refused(f"Error: pipeline {pipeline_id} not found")
    view = pipeline_view(state["pipelines"][pipeline_id])
    text = "\n".join([f"pipeline {pipeline_id}: {view['state']}"] +
                     [f"  {s['name']:12s} {s['state']:10s} {s['meanScore']}" for s in view["stages"]])
    emit(view, text, flags)
    if verb == "wait" and flags.get("exit-status") and view["state"] in ("FAILED", "CANCELLED"):
        raise Refused(f"Error: pipeline {pipeline_id} ended {view['state']}")


def simple(kind: str):
    def handler(state: dict, words: list, flags: dict) -> None:
        if kind == "auth":
            emit({"loggedIn": True, "user": "tester@example.com"}, "Logged in as tester@example.com", flags)
        else:
            repo = arg(words, 3, "REPO")
            state["base_models"][repo] = "READY"
            emit({"baseModel": repo, "state": "READY"}, f"base model {repo}: READY", flags)
    return handler


HANDLERS = {
    ("auth", "status"): simple("auth"),
    ("training", "base-models", "select"): simple("base-model"),
    ("datasets", "create"): create_dataset,
    ("training", "bundles", "push"): push_bundle,
    ("training", "workloads", "get"): workload,
    ("training", "workloads", "create"): workload,
    ("training", "workloads", "set-evaluation"): workload,
    ("training", "pipelines", "start"): start_pipeline,
    ("training", "pipelines", "wait"): pipeline_command,
    ("training", "pipelines", "get"): pipeline_command,
}


def _matches(words: list[str], variable: str) -> bool:
    prefix = os.environ.get(variable, "").split()
    return bool(prefix) and words[:len(prefix)] == prefix


def main(argv: list[str]) -> int:
    home = Path(os.environ["FAKE_AKKA_DIR"])
    home.mkdir(parents=True, exist_ok=True)
    env = {k: os.environ.get(k) for k in ("TRAINER_URL", "AKKA_DISABLE_PROMPTS")}
    with open(home / "calls.jsonl", "a", encoding="utf-8") as log:
        log.write(json.dumps({"argv": argv, "env": env}) + "\n")
    state_path = home / "state.json"
    state = (json.loads(state_path.read_text()) if state_path.exists() else
             {"base_models": {}, "datasets": {}, "bundles": {}, "workloads": {}, "pipelines": {}})
    try:
        words, flags = parse(argv)
        if os.environ.get("FAKE_AKKA_LOGGED_OUT") == "1":
            raise Refused("Error: not logged in. Run 'akka-optimize auth login' to log in.")
        handler = next((h for k, h in HANDLERS.items() if tuple(words[:len(k)]) == k), None)
        if handler is None:
            raise Refused(f"Error: unknown command \"{' '.join(words)}\" for \"akka-optimize\"", 2)
        if _matches(words, "FAKE_AKKA_HANG"):
            time.sleep(120)
        if _matches(words, "FAKE_AKKA_FAIL"):
            raise Refused("Error: simulated failure: the service answered 500 Internal Server Error")
        handler(state, words, flags)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return exc.code
    finally:
        state_path.write_text(json.dumps(state, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
