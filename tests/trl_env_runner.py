"""Run TRL's own GRPOTrainer on CPU with the bundle's multi-turn environment (``environment_factory``).

    python tests/trl_env_runner.py ZIP TRL_ROWS_JSONL OUT_JSON

No download: a tiny random Qwen2 built from a config, a tokenizer trained on the rows' texts, and
TRL's own Qwen2.5 chat template (which renders tool calls, so TRL parses them). The zip is
unpacked and ``environment.py`` loaded by file path, as a user would. A short supervised warm-up
on whole episodes (a ``query`` call with the gold, its result, a ``submit`` call: right for some
rows, a near miss for others) so that sampled rollouts call the tools and some answers are right,
then a few GRPO steps whose reward is ``get_reward()``. OUT_JSON gets, for every rollout, what the
environment saw and paid, and what ``reward.compute_score`` and ``grader.compute_score`` give the
submitted text called directly.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import zipfile

import trl_runner

STEPS = 3
ROWS = 4
WARMUP_STEPS = 150


def conversation(row: dict, tools: list, answer: str, seen: str) -> list[dict]:
    call = {"type": "function", "function": {"name": "query", "arguments": {"sql": row["ground_truth"]}}}
    final = {"type": "function", "function": {"name": "submit", "arguments": {"sql": answer}}}
    return row["prompt"] + [{"role": "assistant", "content": "", "tool_calls": [call]},
                            {"role": "tool", "name": "query", "content": seen},
                            {"role": "assistant", "content": "", "tool_calls": [final]}]


def main() -> None:
    zip_path, rows_path, out_path = sys.argv[1:4]
    started = time.perf_counter()
    import torch
    import trl
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="trl-env-")
    folder = os.path.join(work, "spider_scoring_bundle")
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(folder)
    environment = trl_runner.load_file(os.path.join(folder, "environment.py"), "spider_environment")
    reward = trl_runner.load_file(os.path.join(folder, "reward.py"), "spider_reward")
    grader = trl_runner.load_file(os.path.join(folder, "grader.py"), "spider_grader")
    rows = [json.loads(line) for line in open(rows_path, encoding="utf-8")][:ROWS]
    probe = environment.trl_environment()
    tools = [probe.query, probe.submit]
    episodes = []
    for i, row in enumerate(rows):
        probe.reset(**row)
        seen = probe.query(row["ground_truth"])
        answer = row["ground_truth"] if i % 2 == 0 else row["ground_truth"] + " LIMIT 1"  # right, and a near miss
        episodes.append(conversation(row, tools, answer, seen))
    tokenizer = trl_runner.build_tokenizer([])
    tokenizer.chat_template = qwen2_5_chat_template
    texts = [tokenizer.apply_chat_template(e, tools=tools, tokenize=False) for e in episodes]
    tokenizer = trl_runner.build_tokenizer(texts)
    tokenizer.chat_template = qwen2_5_chat_template
    texts = [tokenizer.apply_chat_template(e, tools=tools, tokenize=False) for e in episodes]
    t = time.perf_counter()
    model = trl_runner.warm_up(tokenizer, texts, WARMUP_STEPS, max_positions=4096)
    warm_s = time.perf_counter() - t

    rollouts: list[dict] = []

    class Recorded(environment.SpiderSQLEnvironment):
        """The bundle's environment, noting each rollout's episode when TRL reads its reward."""

        def get_reward(self):
            value = super().get_reward()
            episode = self.episode
            answer = episode.answer if episode is not None else None
            rollouts.append({"db_id": episode.db_id if episode else None, "gold": episode.call.gold if episode else None,
                             "queries": episode.calls if episode else 0, "steps": episode.steps if episode else 0,
                             "submitted": answer.verdict.sql if answer else None,
                             "text": answer.text if answer else None,
                             "outcome": answer.verdict.outcome if answer else None, "reward": value,
                             "fault": self.fault})
            return value

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    cfg = GRPOConfig(output_dir=os.path.join(work, "out"), use_cpu=True, bf16=False, fp16=False,
                     per_device_train_batch_size=4, num_generations=4, max_completion_length=256,
                     max_tool_calling_iterations=4, max_steps=STEPS, logging_steps=1, save_strategy="no",
                     report_to="none", learning_rate=1e-4, beta=0.0, temperature=1.0, seed=0,
                     dataloader_num_workers=0, log_completions=False)
    trainer = GRPOTrainer(model=model, args=cfg, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          environment_factory=Recorded)
    t = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t
    for r in rollouts:
        if r["gold"] is not None:
            text = r["text"] if r["text"] is not None else ""
            r["paid"] = reward.compute_score(data_source="spider", solution_str=text, ground_truth=r["gold"],
                                             extra_info={"db_id": r["db_id"]})
            r["graded"] = grader.compute_score(data_source="spider", solution_str=text, ground_truth=r["gold"],
                                               extra_info={"db_id": r["db_id"]})
    report = {"versions": {"trl": trl.__version__, "torch": torch.__version__}, "rollouts": rollouts,
              "warmup_seconds": round(warm_s, 1), "train_seconds": round(train_s, 1),
              "global_step": trainer.state.global_step, "seconds": round(time.perf_counter() - started, 1)}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    main()
