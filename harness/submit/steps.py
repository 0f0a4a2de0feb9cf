"""`submit`: verify the bundle, then register everything and run pipeline.json with `akka-optimize`.

Sequence (README "Pipeline and submission"): pre-push verification (stops on failure) ->
``training base-models select REPO --wait`` -> ``datasets create`` x3 -> ``training bundles push``
-> ``training workloads get NAME || training workloads create NAME`` -> ``set-evaluation`` ->
``training pipelines start`` -> ``pipelines wait --exit-status`` -> ``pipelines get``.

Idempotent: registrations are safe to repeat (same content, same hash; the workload is created only
when missing), and the started pipeline's id is kept in OUT/submission.json with the SHA-256 of
its inputs, so a second run with the same inputs waits on that pipeline instead of paying for
another (``--new-pipeline`` starts one anyway). The trainer's address is the CLI's business
(TRAINER_URL in the environment, or the CLI's own context): it is passed through, never set here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

from harness.common.errors import InputError, SubmitError
from harness.common.files import atomic_write_bytes, sha256_file
from harness.common.layout import SPLITS, Prepared, hint
from harness.submit import names as N
from harness.submit import pipeline
from harness.submit.process import Result, Runner, Verifier, run_process

# A failed step whose output matches this is reported as "not logged in", not as a step failure.
AUTH_PATTERN = re.compile(r"not logged in|log ?in first|unauthori[sz]ed|unauthenticated|"
                          r"\b401\b|(token|session|credentials?) (has |have )?expired", re.I)
LOGIN_HINT = (f"log in with the CLI (`{N.CLI} auth login`), check that it talks to the right "
              "trainer (TRAINER_URL, or the CLI's --context / ~/.akka/config.yaml), then re-run")


@dataclasses.dataclass(frozen=True)
class Step:
    """One `akka-optimize` call: a label for messages, its arguments, and what to do if it fails."""

    label: str
    args: tuple[str, ...]
    hint: str
    timeout_s: float = 300.0
    stream: bool = False  # print the output as it comes (a pipeline wait lasts hours)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The files a submission sends: a prepared folder's splits and pipeline.json, and the zip."""

    data: Prepared
    zip_path: Path

    @property
    def pipeline_json(self) -> Path:
        return self.data.pipeline

    @property
    def state_json(self) -> Path:
        return self.data.submission

    def split(self, split: str) -> Path:
        return self.data.split(split)

    def all_files(self) -> list[Path]:
        return [self.pipeline_json, self.zip_path] + [self.split(s) for s in SPLITS]


def registration_steps(names: N.Names, inputs: Inputs) -> list[Step]:
    """Base model, datasets, bundle: each safe to repeat (same content -> same hash)."""
    steps = [Step(f"select base model {names.base_model}",
                  (*N.CMD_SELECT_BASE_MODEL, names.base_model, "--wait"),
                  "check the repository id (--base-model) and that the trainer can fetch it",
                  timeout_s=3600.0)]
    for split, dataset in names.datasets.items():
        steps.append(Step(f"register dataset {dataset}",
                          (*N.CMD_CREATE_DATASET, "-f", str(inputs.split(split)), "--name", dataset),
                          f"check {inputs.split(split)} (one chat row per line); regenerate the "
                          "splits if the trainer rejects a row", timeout_s=1800.0))
    steps.append(Step(f"push bundle {names.bundle}",
                      (*N.CMD_PUSH_BUNDLE, str(inputs.zip_path), "--name", names.bundle),
                      "the trainer refused the zip: rebuild it with the pack step and run the "
                      "pre-push verification; its message names the entry at fault",
                      timeout_s=1800.0))
    return steps


def workload_steps(names: N.Names) -> tuple[Step, Step, Step]:
    """(get, create, set-evaluation); create runs only when get fails."""
    return (Step(f"look up workload {names.workload}", (*N.CMD_GET_WORKLOAD, names.workload), ""),
            Step(f"create workload {names.workload}", (*N.CMD_CREATE_WORKLOAD, names.workload),
                 "the workload could neither be read nor created: check the name (--workload) "
                 "and your rights on the trainer"),
            Step(f"set evaluation of {names.workload}",
                 (*N.CMD_SET_EVALUATION, names.workload, "--dataset", names.datasets["eval"],
                  "--grader", names.workload_grader()),
                 "check that the eval dataset and the bundle were registered by the steps above"))


def start_step(inputs: Inputs) -> Step:
    # --force: the CLI asks for confirmation before starting a pipeline unless told not to, and
    # nobody is there to answer (stdin is closed); it is one of the CLI's documented global flags.
    return Step("start pipeline", (*N.CMD_START_PIPELINE, "-f", str(inputs.pipeline_json),
                                   "-o", "json", "--jq", ".pipelineId", "--force"),
                "the trainer refused the plan: check its message against pipeline.json "
                f"(`{N.CLI} {' '.join(N.CMD_START_PIPELINE)} -f {inputs.pipeline_json} --dry-run` "
                "runs the trainer's own checks)", timeout_s=600.0)


def wait_step(pipeline_id: str, timeout_s: float) -> Step:
    return Step(f"wait for pipeline {pipeline_id}", (*N.CMD_WAIT_PIPELINE, pipeline_id, "--exit-status"),
                f"a stage failed or was cancelled: `{N.CLI} {' '.join(N.CMD_GET_PIPELINE)} "
                f"{pipeline_id}` shows which; fix it, then `{N.CLI} training pipelines resume "
                f"{pipeline_id}` or `make submit NEW_PIPELINE=1`", timeout_s=timeout_s, stream=True)


def get_step(pipeline_id: str) -> Step:
    return Step(f"read pipeline {pipeline_id}", (*N.CMD_GET_PIPELINE, pipeline_id),
                "the pipeline ran; read it again later with the same command")


class Session:
    """Runs steps through a runner, turning every failure into a SubmitError that says what to do."""

    def __init__(self, cli: str, runner: Runner, say: Callable[[str], None]) -> None:
        self.cli, self.runner, self.say = cli, runner, say

    def command(self, step: Step) -> list[str]:
        return [self.cli, *step.args]

    def attempt(self, step: Step) -> Result:
        """Run a step; return its result whatever the exit code (missing CLI and timeouts raise)."""
        self.say(f"==> {step.label}: {shlex.join(self.command(step))}")
        try:
            return self.runner(self.command(step), step.timeout_s, step.stream)
        except FileNotFoundError:
            raise SubmitError(missing_cli_message(self.cli)) from None
        except PermissionError:
            raise SubmitError(f"{self.cli} is not executable: fix its permissions "
                              f"(chmod +x) or point --cli at the real program") from None
        except TimeoutError:
            raise SubmitError(f"step '{step.label}' did not finish within {step.timeout_s:g} s "
                              f"and was stopped; command: {shlex.join(self.command(step))}. "
                              "Re-run `make submit` (every step is safe to repeat), or raise the "
                              "limit (--step-timeout / --wait-timeout)") from None

    def run(self, step: Step) -> Result:
        """Run a step that must succeed."""
        result = self.attempt(step)
        if result.returncode != 0:
            raise self.failure(step, result)
        if not step.stream and result.output.strip():
            self.say(_indent(result.output))
        return result

    def failure(self, step: Step, result: Result, hint: str | None = None) -> SubmitError:
        """The error for a failed step: which step, its command, what it printed, what to do."""
        printed = _indent(_tail(result.output)) or "    (nothing)"
        if AUTH_PATTERN.search(result.output):
            return SubmitError(f"not logged in to the trainer: step '{step.label}' was refused "
                               f"(exit {result.returncode}). The CLI printed:\n{printed}\n"
                               f"What to do: {LOGIN_HINT}")
        return SubmitError(f"step '{step.label}' failed (exit {result.returncode}).\n"
                           f"  command: {shlex.join(self.command(step))}\n  it printed:\n{printed}\n"
                           f"What to do: {hint or step.hint}")


def missing_cli_message(cli: str) -> str:
    return (f"`{cli}` was not found on PATH. Install the Akka Optimize CLI (doc.akka.io, "
            f"'install the CLI'), check that `{cli} --help` runs in this shell, log in, and "
            "re-run `make submit`; `make submit DRY_RUN=1` prints the commands without it")


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())


def parse_pipeline_id(stdout: str) -> str | None:
    """The id printed by ``start -o json --jq .pipelineId`` (raw or as a JSON string).

    >>> parse_pipeline_id('"3f9a21c4d08b7e56"\\n'), parse_pipeline_id("3f9a21c4d08b7e56"), parse_pipeline_id("null")
    ('3f9a21c4d08b7e56', '3f9a21c4d08b7e56', None)
    """
    text = stdout.strip()
    try:
        value = json.loads(text) if text.startswith(("\"", "{", "n")) else text
    except ValueError:
        value = text
    if isinstance(value, dict):
        value = value.get("pipelineId")
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9._:-]+", value):
        return value
    return None


def fingerprint(inputs: Inputs) -> dict[str, str]:
    """SHA-256 of every file sent, by role (not path: `out` and `./out` are the same submission)."""
    roles = ["pipeline", "bundle", *SPLITS]
    return {role: sha256_file(path) for role, path in zip(roles, inputs.all_files())}


def report_bundle_hash(output: str, zip_path: Path, say: Callable[[str], None]) -> None:
    """Print the zip's SHA-256 (the bundle's identity) and warn if the CLI printed another one."""
    local = sha256_file(zip_path)
    say(f"    bundle hash (SHA-256 of {zip_path}): {local}")
    printed = set(re.findall(r"\b[0-9a-f]{64}\b", output.lower()))
    if printed and local not in printed:
        say(f"warning: the trainer printed {', '.join(sorted(printed))}, not the local zip's hash: "
            "the zip changed during the push, or the trainer hashes differently; push again")


# --- the submission --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Options:
    names: N.Names
    inputs: Inputs
    cli: str = N.CLI
    step_timeout_s: float | None = None  # None: each step's own default
    wait_timeout_s: float = 48 * 3600.0
    new_pipeline: bool = False
    lenient_lengths: bool = False


def check_inputs(opts: Options, say: Callable[[str], None]) -> None:
    """Every file exists and pipeline.json is valid for these names and splits (nothing sent yet)."""
    inputs = opts.inputs
    missing = [f"{p}: {hint(p)}" for p in inputs.all_files() if not p.is_file()]
    if missing:
        raise InputError("missing input(s), nothing was submitted:\n  - " + "\n  - ".join(missing))
    doc = pipeline.load(inputs.pipeline_json)
    for note in pipeline.validate(doc, opts.names, inputs.data, lenient_lengths=opts.lenient_lengths):
        say(f"    {note}")


def trainer_line() -> str:
    url = os.environ.get("TRAINER_URL")
    return (f"trainer: TRAINER_URL={url}" if url
            else f"trainer: the {N.CLI} CLI's current context (TRAINER_URL is not set)")


def _with_timeout(step: Step, opts: Options) -> Step:
    if opts.step_timeout_s is None:
        return step
    return dataclasses.replace(step, timeout_s=opts.step_timeout_s)


def ensure_workload(session: Session, opts: Options) -> None:
    """``workloads get NAME || workloads create NAME``, then ``set-evaluation`` every time."""
    get, create, set_eval = (_with_timeout(s, opts) for s in workload_steps(opts.names))
    found = session.attempt(get)
    if found.returncode == 0:
        session.say("    workload exists")
    elif AUTH_PATTERN.search(found.output):
        raise session.failure(get, found)
    else:
        session.say("    not found (or unreadable): creating it")
        created = session.attempt(create)
        if created.returncode != 0:
            raise session.failure(create, created)
    session.run(set_eval)


def start_or_follow(session: Session, opts: Options) -> str:
    """Start the pipeline, or return the one already started from identical inputs."""
    inputs = opts.inputs
    prints = fingerprint(inputs)
    try:
        state = json.loads(inputs.state_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        state = {}
    if not opts.new_pipeline and state.get("inputs") == prints and state.get("pipelineId"):
        session.say(f"==> pipeline {state['pipelineId']} was already started from these exact inputs "
                    f"({inputs.state_json}): following it instead of starting another "
                    "(--new-pipeline, or make submit NEW_PIPELINE=1, starts a new one)")
        return state["pipelineId"]
    step = _with_timeout(start_step(inputs), opts)
    result = session.run(step)
    pipeline_id = parse_pipeline_id(result.stdout)
    if pipeline_id is None:
        raise session.failure(step, result, hint=(
            "the pipeline may have started, but no id was printed: look for it with "
            f"`{N.CLI} training pipelines list --phase open` before submitting again"))
    record = {"pipelineId": pipeline_id, "inputs": prints, "trainerUrl": os.environ.get("TRAINER_URL")}
    atomic_write_bytes(inputs.state_json, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    return pipeline_id


def follow(session: Session, pipeline_id: str, opts: Options) -> None:
    """Wait with ``--exit-status``; show ``pipelines get`` whether it succeeded or not."""
    wait = wait_step(pipeline_id, opts.wait_timeout_s)
    waited = session.attempt(wait)
    if waited.returncode != 0:
        shown = session.attempt(_with_timeout(get_step(pipeline_id), opts))
        if shown.returncode == 0:
            session.say(_indent(shown.output))
        raise session.failure(wait, waited)
    session.run(_with_timeout(get_step(pipeline_id), opts))


def submit(opts: Options, runner: Runner, verifier: Verifier | None,
           say: Callable[[str], None] = print) -> str:
    """The whole sequence; returns the pipeline id. ``verifier`` None skips verification."""
    check_inputs(opts, say)
    if shutil.which(opts.cli) is None:  # before verification: no point verifying for minutes first
        raise SubmitError(missing_cli_message(opts.cli))
    say(trainer_line())
    if verifier is not None:
        verifier()
    session = Session(opts.cli, runner, say)
    for step in registration_steps(opts.names, opts.inputs):
        result = session.run(_with_timeout(step, opts))
        if step.args[:len(N.CMD_PUSH_BUNDLE)] == N.CMD_PUSH_BUNDLE:
            report_bundle_hash(result.output, opts.inputs.zip_path, say)
    ensure_workload(session, opts)
    pipeline_id = start_or_follow(session, opts)
    follow(session, pipeline_id, opts)
    say(f"pipeline {pipeline_id} completed; its id is kept in {opts.inputs.state_json}")
    return pipeline_id


def dry_run(opts: Options, verify_line: str, say: Callable[[str], None] = print) -> None:
    """Print what `submit` would run, in order, then check the inputs; run and send nothing."""
    show = Session(opts.cli, runner=run_process, say=say).command
    get, create, set_eval = workload_steps(opts.names)
    lines = [verify_line]
    lines += [shlex.join(show(s)) for s in registration_steps(opts.names, opts.inputs)]
    lines += [f"{shlex.join(show(get))} || {shlex.join(show(create))}", shlex.join(show(set_eval))]
    lines += [shlex.join(show(start_step(opts.inputs))) + "    # skipped when "
              f"{opts.inputs.state_json} names a pipeline started from the same inputs",
              shlex.join(show(wait_step("PIPELINE_ID", opts.wait_timeout_s))),
              shlex.join(show(get_step("PIPELINE_ID")))]
    say("dry run: nothing is run or sent. `make submit` would run, in order:")
    for number, line in enumerate(lines, 1):
        say(f"  {number:2d}. {line}")
    say(trainer_line())
    check_inputs(opts, say)
    say("inputs are complete and pipeline.json is valid")
