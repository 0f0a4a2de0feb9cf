"""Run OpenRLHF's own ``MultiTurnAgentExecutor`` over the bundle's ``openrlhf_agent.py``.

    PYTHONPATH=.venv-openrlhf python tests/openrlhf_runner.py ZIP ROWS_JSONL OUT_JSON

The zip is unpacked and the agent file loaded by path and checked as OpenRLHF 0.11's
``_load_agent_executor`` does (``AgentExecutor``, a subclass of its ``AgentExecutorBase``, made with
no argument). Its ``execute`` runs each episode with a scripted engine in place of vLLM (each turn's
text given, tokenized by a small tokenizer): a query of the gold then the gold as the answer, a
query then a near miss, a bare wrong answer, a query past the episode's budget of queries. OUT_JSON
gets per episode what OpenRLHF returned (reward, scores, the observation text) and what
``reward.compute_score`` gives the answer called directly.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
import tempfile
import zipfile
from types import SimpleNamespace

import trl_runner


class ScriptedEngine:
    """vLLM's ``generate`` as OpenRLHF calls it, answering each call with the script's next turn."""

    def __init__(self, tokenizer, turns: list[str]) -> None:
        self.tokenizer, self.turns, self.seen = tokenizer, list(turns), 0

    async def generate(self, token_ids, sampling_params, multi_modal_data=None):
        text = self.turns[min(self.seen, len(self.turns) - 1)]
        self.seen += 1
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, text=text, finish_reason="stop", logprobs=None)])


def load_agent_executor(path: str):
    from openrlhf.utils.agent import AgentExecutorBase
    spec = importlib.util.spec_from_file_location("agent_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert hasattr(module, "AgentExecutor")
    assert issubclass(module.AgentExecutor, AgentExecutorBase)
    return module.AgentExecutor()


def main() -> None:
    zip_path, rows_path, out_path = sys.argv[1:4]
    import openrlhf.utils.agent as agent_module
    work = tempfile.mkdtemp(prefix="openrlhf-")
    folder = os.path.join(work, "spider_scoring_bundle")
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(folder)
    reward = trl_runner.load_file(os.path.join(folder, "reward.py"), "spider_reward")
    rows = [json.loads(line) for line in open(rows_path, encoding="utf-8")][:6]
    tokenizer = trl_runner.build_tokenizer([m["content"] for r in rows for m in r["input"]])
    executor = load_agent_executor(os.path.join(folder, "openrlhf_agent.py"))
    episodes = []
    for i, row in enumerate(rows):
        gold = row["label"]["ground_truth"]
        scripts = [[f"<query>{gold}</query>", f"<answer>{gold}</answer>"],
                   ["<query>SELECT 1</query>", f"<answer>{gold.rstrip(';')} LIMIT 1</answer>"],
                   ["SELECT 1"],
                   [f"<query>{gold}</query>"] * 12]
        for script in scripts:
            prompt = tokenizer.apply_chat_template(row["input"], tokenize=False, add_generation_prompt=True)
            engine = ScriptedEngine(tokenizer, script)
            sampling = SimpleNamespace(max_tokens=256, logprobs=None)
            done = asyncio.run(executor.execute(prompt, row["label"], sampling, 100_000, tokenizer, engine))
            answer = engine.turns[min(engine.seen, len(engine.turns)) - 1]
            kind_text = answer if "<answer>" in answer or "<query>" not in answer else ""
            text = kind_text.split("<answer>")[-1].split("</answer>")[0] if "<answer>" in kind_text else kind_text
            episodes.append({"row": i, "turns": engine.seen, "reward": done["reward"], "scores": float(done["scores"]),
                             "extra_logs": {k: float(v) for k, v in done["extra_logs"].items()},
                             "observation": done["observation_tokens"] and tokenizer.decode(done["observation_tokens"]),
                             "answer": text,
                             "paid": reward.compute_score(solution_str=text, ground_truth=gold,
                                                          extra_info={"db_id": row["label"].get("db_id")})})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"openrlhf": agent_module.__file__, "episodes": episodes}, f, indent=1)


if __name__ == "__main__":
    main()
