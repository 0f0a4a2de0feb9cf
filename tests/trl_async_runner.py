"""TRL's AsyncGRPOTrainer reward process with the packed bundle's ``reward.trl_reward`` (CPU, no vLLM).

    python tests/trl_async_runner.py ZIP TRL_ROWS_JSONL OUT_JSON

``AsyncGRPOTrainer`` runs its rollouts in a child process started with ``spawn``
(``trl.experimental.async_grpo.async_rollout_worker``): every reward function is pickled into it,
and the child's ``_AsyncRolloutLoop._score_group`` calls them on each group of completions. This
runner starts that child exactly so (TRL's ``_child_main`` in a ``spawn`` context, the loop's
keyword arguments pickled by multiprocessing) with ``reward.trl_reward`` loaded by file path from
the unpacked zip. Generation needs a vLLM server, which is not installed: the loop here is TRL's
with ``run`` replaced by a pass over given completions (the gold, a wrong query, the gold in a
fence, prose; the fourth row's gold is one the bundle never saw), so everything from the pickled
reward function to TRL's advantage and metrics is TRL's own. OUT_JSON gets each completion's reward as the child computed it and the bundle's own
verdicts (``grader.compute_score`` in this process).
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import queue
import sys
import tempfile
import zipfile

for name, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                    "TRL_EXPERIMENTAL_SILENCE": "1", "WANDB_MODE": "disabled"}.items():
    os.environ[name] = value
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from trl.experimental.async_grpo import async_rollout_worker as arw  # noqa: E402

from trl_runner import build_tokenizer  # noqa: E402

GROUP = 4  # completions per prompt


def completions_for(gold: str) -> list[str]:
    return [gold, "SELECT 1", f"```sql\n{gold}\n```", "I do not know."]


class ScoreOnlyLoop(arw._AsyncRolloutLoop):
    """TRL's rollout loop, scoring given completions instead of generating them."""

    def run(self) -> None:
        for group_id, row in enumerate(self.dataset):
            texts = completions_for(row["ground_truth"])
            group = arw.RolloutGroup(
                prompts=[row["prompt"]] * GROUP,
                reward_kwargs={key: [row[key]] * GROUP for key in row if key not in ("prompt", "completion")},
                completions=[[{"role": "assistant", "content": t}] for t in texts],
                completions_ids=[[0]] * GROUP,
                completions_sequences=[[arw.TrainingSequence([0, 1], [0, 1], [0.0, 0.0], f"{group_id}-{i}")]
                                       for i in range(GROUP)],
                tool_call_counts=[0] * GROUP, tool_failure_counts=[0] * GROUP, model_version=0, group_id=group_id,
                env_rewards=[], rollout_rewards=[])
            samples = self._loop.run_until_complete(self._score_group(group))
            self.rollout_buffer.put({"pid": os.getpid(), "texts": texts, "metrics": [s.metrics for s in samples],
                                     "advantages": [s.advantage for s in samples]})
        self.rollout_buffer.put(None)


def bundle_score(grader, text: str, gold: str) -> float | None:
    """The bundle's own verdict; None for a row it cannot score (its typed error carries a code)."""
    try:
        return grader.compute_score(solution_str=text, ground_truth=gold)
    except Exception as exc:
        if getattr(exc, "code", None) is None:
            raise
        return None


def load_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    zip_path, rows_path, out_path = sys.argv[1:4]
    from datasets import Dataset
    folder = os.path.join(tempfile.mkdtemp(prefix="trl-async-"), "spider_scoring_bundle")
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(folder)
    reward = load_file(os.path.join(folder, "reward.py"), "spider_reward")  # by path: not importable in the child
    grader = load_file(os.path.join(folder, "grader.py"), "spider_grader")
    rows = [json.loads(line) for line in open(rows_path, encoding="utf-8")][:4]
    rows[3]["ground_truth"] = "SELECT 'a gold this bundle never saw'"  # a stale row: its group is unscored
    tokenizer = build_tokenizer([m["content"] for r in rows for m in r["prompt"]] + [r["ground_truth"] for r in rows])
    # the loop wants a way to parse tool calls out of generated text; none is generated here
    tokenizer.response_schema = {"type": "object", "properties": {"role": {"const": "assistant"},
                                                                  "content": {"type": "string"}}}
    ctx = multiprocessing.get_context("spawn")  # as AsyncRolloutWorker does
    buffer, version, stop, ready = ctx.Queue(), ctx.Value("i", 0), ctx.Event(), ctx.Event()
    heartbeat, failed, info, metrics = ctx.Value("d", 0.0), ctx.Event(), ctx.Queue(maxsize=1), ctx.Queue()
    loop_kwargs = {"model_name": "tiny", "dataset": Dataset.from_list(rows), "reward_funcs": [reward.trl_reward],
                   "processing_class": tokenizer, "eos_token_ids": [tokenizer.eos_token_id], "num_generations": GROUP}
    child = ctx.Process(target=arw._child_main, args=(ScoreOnlyLoop, loop_kwargs, buffer, version, stop, ready,
                                                      heartbeat, failed, info, metrics), daemon=True)
    child.start()
    groups: list[dict] = []
    while True:
        try:
            item = buffer.get(timeout=1)
        except queue.Empty:
            if child.exitcode is not None:
                raise SystemExit(f"the reward process ended (exit code {child.exitcode}) after {len(groups)} groups") from None
            continue
        if item is None:
            break
        groups.append(item)
    child.join(timeout=60)
    for group, row in zip(groups, rows):
        group["bundle"] = [bundle_score(grader, t, row["ground_truth"]) for t in group["texts"]]
    report = {"parent_pid": os.getpid(), "exitcode": child.exitcode, "groups": groups,
              "reward_name": getattr(reward.trl_reward, "__name__", "")}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
