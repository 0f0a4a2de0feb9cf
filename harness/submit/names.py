"""Every name the trainer sees, and every `akka-optimize` command word, in one place.

The trainer's documentation exists in two generations: the "trainer" pages (workloads,
``training bundles push``, ``datasets create``), which this project is built for, and newer pages
(training projects, ``registry bundles register``). Keeping the names and the command words here
means moving to the newer generation is an edit of this module, not a hunt through the code.

>>> DEFAULT_NAMES.datasets["rl"]
'spider-rl'
>>> DEFAULT_NAMES.pipeline_grader()
'bundle:spider-scoring/grader'
"""

from __future__ import annotations

import dataclasses

# The command line program, looked up on PATH (tests put a fake one first on PATH).
CLI = "akka-optimize"

# The reference example's base model (a Hugging Face repository id).
BASE_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"

# Scoring bundle: its registered name and the modules the trainer imports (the zip's file name is
# harness.common.layout.ZIP_NAME).
BUNDLE = "spider-scoring"
REWARD_MODULE = "reward"
GRADER_MODULE = "grader"

# The workload that owns the runs and the evaluation settings.
WORKLOAD = "spider-sql"

# Split -> registered dataset name.
DATASETS: dict[str, str] = {"train": "spider-train", "rl": "spider-rl", "eval": "spider-eval"}

# Command words of the first-generation CLI (trainer-contract.md, "CLI behaviour used by the
# walkthrough"). The newer generation renames some of them (e.g. workloads -> projects).
CMD_SELECT_BASE_MODEL = ("training", "base-models", "select")
CMD_CREATE_DATASET = ("datasets", "create")
CMD_PUSH_BUNDLE = ("training", "bundles", "push")
CMD_GET_WORKLOAD = ("training", "workloads", "get")
CMD_CREATE_WORKLOAD = ("training", "workloads", "create")
CMD_SET_EVALUATION = ("training", "workloads", "set-evaluation")
CMD_START_PIPELINE = ("training", "pipelines", "start")
CMD_WAIT_PIPELINE = ("training", "pipelines", "wait")
CMD_GET_PIPELINE = ("training", "pipelines", "get")


@dataclasses.dataclass(frozen=True)
class Names:
    """The trainer-facing names one submission uses; defaults are the reference example's."""

    base_model: str = BASE_MODEL
    bundle: str = BUNDLE
    workload: str = WORKLOAD
    datasets: dict[str, str] = dataclasses.field(default_factory=lambda: dict(DATASETS))

    def pipeline_grader(self) -> str:
        """The grader spec written into pipeline.json's evaluate stages.

        The issue spells it ``bundle:<bundle>/grader``; the trainer's reference writes grader specs
        as ``bundle:REFERENCE#MODULE[:FUNCTION]`` (what ``workload_grader`` returns). Both name the
        same module of the same bundle; change this one line if the trainer refuses the first.
        """
        return f"bundle:{self.bundle}/{GRADER_MODULE}"

    def workload_grader(self) -> str:
        """The grader spec given to ``set-evaluation`` (the documented ``REFERENCE#MODULE`` form)."""
        return f"bundle:{self.bundle}#{GRADER_MODULE}"

    def grader_specs(self) -> set[str]:
        """Every spelling accepted as "the bundle's grader" when validating a pipeline."""
        return {self.pipeline_grader(), self.workload_grader()}


DEFAULT_NAMES = Names()
