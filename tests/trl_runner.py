"""Run TRL's own GRPOTrainer on CPU for a few steps with the packed bundle's ``reward.trl_reward``.

    python tests/trl_runner.py ZIP TRL_ROWS_JSONL OUT_JSON [VARIANTS]

No download: a tiny random Qwen2 built from a config and a tokenizer trained on the rows' texts.
The zip is unpacked into a folder and ``reward.py`` / ``grader.py`` are loaded by file path, as a
user would. Two runs with the same seed: the exported rows as they are, and the same rows with
extra columns named like completions (``output``, ``solution_str``, ``completion``, ``response``,
each holding the gold); VARIANTS (comma-separated) runs fewer. For each run, OUT_JSON gets what TRL
computed (its logged completions and rewards per step), the bundle's own verdicts on the same
completions (``grader.compute_score``) and what its reward pays for them called directly
(``reward.compute_score``: the verdict under a binary bundle, the shape's value under another).
A short supervised warm-up on prompt + gold first, so that some sampled completions are right and
some wrong (a random model scores 0 everywhere, which would prove nothing).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
import tempfile
import time
import zipfile

for name, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "WANDB_DISABLED": "true", "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false",
                    "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1"}.items():
    os.environ[name] = value

WARMUP_STEPS = 120
STEPS = 3  # one prompt and its 4 completions a step
ROWS = 6  # the first rows of the file: enough for 3 steps, and a warm-up that takes seconds
EXTRA = ("output", "solution_str", "completion", "response")


def load_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_tokenizer(texts):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    specials = ["<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=800, special_tokens=specials, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|im_end|>")
    hf.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return hf


def build_model(tokenizer, rows, steps=WARMUP_STEPS):
    texts = [tokenizer.apply_chat_template(r["prompt"] + [{"role": "assistant", "content": r["ground_truth"]}],
                                           tokenize=False) for r in rows]
    return warm_up(tokenizer, texts, steps)


def warm_up(tokenizer, texts, steps, max_positions=1024):
    """A 2-layer Qwen2 from a config, trained ``steps`` full-batch steps on ``texts`` (seeded)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                      tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    labels = enc["input_ids"].clone()
    labels[enc["attention_mask"] == 0] = -100
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        model(**enc, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    return model


def train(model, tokenizer, rows, reward, out_dir):
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    seen = []
    arg_types = {}

    def record(completions, **kwargs):  # weight 0: only notes what TRL passes
        arg_types.update({k: type(v).__name__ for k, v in dict(kwargs, completions=completions).items()})
        arg_types["completion_item"] = type(completions[0]).__name__
        return [0.0] * len(completions)

    class Snapshot(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "rewards/trl_reward/mean" in logs:
                L = trainer._logs
                seen.append({"step": state.global_step, "completions": list(L["completion"]),
                             "prompts": list(L["prompt"]), "rewards": list(L["rewards"]["trl_reward"]),
                             "logged_mean": logs["rewards/trl_reward/mean"],
                             "metrics": {k: v for k, v in logs.items() if k.startswith("spider/")},
                             "outcomes": list(L["extra"].get("spider_outcome", []))})

    cfg = GRPOConfig(output_dir=out_dir, use_cpu=True, bf16=False, fp16=False, per_device_train_batch_size=4,
                     num_generations=4, max_completion_length=48, max_steps=STEPS, logging_steps=1,
                     save_strategy="no", report_to="none", learning_rate=1e-4, beta=0.0, temperature=1.0, seed=0,
                     dataloader_num_workers=0, log_completions=True, num_completions_to_print=0,
                     reward_weights=[1.0, 0.0])
    trainer = GRPOTrainer(model=model, reward_funcs=[reward.trl_reward, record], args=cfg,
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[Snapshot()])
    trainer.train()
    return seen, arg_types


def text_of(completion):
    return completion[-1]["content"] if isinstance(completion, list) else completion


def main() -> None:
    zip_path, rows_path, out_path = sys.argv[1:4]
    variants = sys.argv[4].split(",") if len(sys.argv) > 4 else ["plain", "extra_columns"]
    started = time.perf_counter()
    import torch
    import trl
    torch.set_num_threads(1)  # the tests run beside others on a 2-core machine: no thread contention
    work = tempfile.mkdtemp(prefix="trl-run-")
    folder = os.path.join(work, "spider_scoring_bundle")
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(folder)
    reward = load_file(os.path.join(folder, "reward.py"), "spider_reward")
    grader = load_file(os.path.join(folder, "grader.py"), "spider_grader")
    rows = [json.loads(line) for line in open(rows_path, encoding="utf-8")][:ROWS]
    gold_of = {json.dumps(r["prompt"], sort_keys=True): r["ground_truth"] for r in rows}
    tokenizer = build_tokenizer([m["content"] for r in rows for m in r["prompt"]] + [r["ground_truth"] for r in rows])
    report = {"versions": {"trl": trl.__version__, "torch": torch.__version__}, "runs": {}}
    t = time.perf_counter()
    warm = build_model(tokenizer, rows)
    report["warmup_seconds"] = round(time.perf_counter() - t, 1)
    with open(os.path.join(folder, "data", "index.json"), encoding="utf-8") as f:
        report["reward_shape"] = (json.load(f).get("reward_shape") or {}).get("name", "binary")
    for variant in variants:
        data = [dict(r, **{k: r["ground_truth"] for k in EXTRA}) if variant == "extra_columns" else r for r in rows]
        t = time.perf_counter()
        model = copy.deepcopy(warm)
        seen, arg_types = train(model, tokenizer, data, reward, os.path.join(work, variant))
        for step in seen:
            golds = [gold_of[json.dumps(p, sort_keys=True)] for p in step["prompts"]]
            step["texts"] = [text_of(c) for c in step["completions"]]
            step["bundle"] = [grader.compute_score(data_source="spider", solution_str=s, ground_truth=g)
                              for s, g in zip(step["texts"], golds)]
            step["paid"] = [reward.compute_score(data_source="spider", solution_str=s, ground_truth=g)
                            for s, g in zip(step["texts"], golds)]
            step["bundle_outcomes"] = [grader.grade(output=s, expected=g)["outcome"] for s, g in zip(step["texts"], golds)]
            del step["prompts"]
        report["runs"][variant] = {"steps": seen, "arg_types": arg_types, "seconds": round(time.perf_counter() - t, 1)}
    report["generic_modules"] = sorted(m for m in ("verify", "reward", "grader", "scoring_entry", "sql_guard", "sql", "scoring", "search")
                                       if m in sys.modules)
    report["seconds"] = round(time.perf_counter() - started, 1)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    main()
