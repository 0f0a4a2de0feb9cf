"""pipeline.json: generated from parameters (reference defaults), validated before submission."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness import cli
from harness.common.errors import InputError
from harness.common.layout import Prepared
from harness.submit.names import DEFAULT_NAMES, Names
from harness.submit.pipeline import PipelineParams, build_pipeline, check_data, estimate_tokens, validate, validate_structure


def chat(user: str, answer: str = "SELECT 1", system: str = "Write one SQLite query.") -> dict:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user},
                         {"role": "assistant", "content": answer}]}


def write_splits(data: Path, rows: dict[str, list[dict]]) -> Path:
    data.mkdir(parents=True, exist_ok=True)
    for split, items in rows.items():
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    return data


@pytest.fixture
def data(tmp_path) -> Path:
    """Reference-sized RL split (600 rows), small train and eval splits, short prompts."""
    return write_splits(tmp_path / "out" / "data", {
        "train": [chat(f"question {i}") for i in range(20)],
        "rl": [chat(f"question {i}") for i in range(600)],
        "eval": [chat(f"question {i}") for i in range(10)]})


def stage(doc: dict, name: str) -> dict:
    return next(s for s in doc["stages"] if s["name"] == name)


def test_defaults_are_the_reference_example():
    doc = build_pipeline(PipelineParams())
    assert doc["kind"] == "pipeline" and doc["baseModel"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert [(s["name"], s["type"]) for s in doc["stages"]] == [
        ("base-scored", "evaluate"), ("sft", "train"), ("sft-scored", "evaluate"),
        ("rl", "train"), ("rl-scored", "evaluate")]
    sft = stage(doc, "sft")
    assert sft["config"] == {"method": "sft", "dataset": "spider-train", "lora": {"rank": 16},
                             "learningRate": 1e-4, "epochs": 1, "maxSeqLength": 768,
                             "precision": "bf16"}
    assert sft["execution"] == {"gpus": 1}
    rl = stage(doc, "rl")
    assert rl["config"] == {
        "method": "grpo", "dataset": "spider-rl", "warmStartModelId": "@sft", "maxSteps": 40,
        "promptsPerStep": 8, "groupSize": 8, "klBeta": 0.0, "temperature": 1.0,
        "maxCompletionLength": 64, "stalenessThreshold": 0, "lora": {"rank": 16},
        "learningRate": 1e-5, "maxSeqLength": 384, "saveEvery": 4, "keepAdapters": 10,
        "microBatchSequences": 32,
        "reward": {"terms": [{"kind": "rule", "weight": 1.0, "bundle": "spider-scoring",
                              "module": "reward"}]}}
    assert rl["execution"]["rolloutGpus"] == 0
    models = {"base-scored": "Qwen/Qwen2.5-0.5B-Instruct", "sft-scored": "@sft", "rl-scored": "@rl"}
    for name, model in models.items():
        evaluate = stage(doc, name)
        assert (evaluate["model"], evaluate["dataset"], evaluate["grader"],
                evaluate["maxCompletionTokens"]) == (model, "spider-eval",
                                                     "bundle:spider-scoring/grader", 128)
    assert all(len(s["description"]) > 40 for s in doc["stages"])


def test_parameters_and_names_flow_into_the_descriptor():
    names = Names(base_model="org/other-model", bundle="b2", workload="w2",
                  datasets={"train": "t2", "rl": "r2", "eval": "e2"})
    doc = build_pipeline(PipelineParams(names=names, rl_max_steps=12, sft_learning_rate=3e-4))
    assert stage(doc, "rl")["config"]["maxSteps"] == 12
    assert stage(doc, "sft")["config"]["learningRate"] == 3e-4
    assert stage(doc, "rl")["config"]["reward"]["terms"][0]["bundle"] == "b2"
    assert stage(doc, "rl-scored")["grader"] == "bundle:b2/grader"
    assert (doc["baseModel"], doc["workload"], stage(doc, "base-scored")["model"]) == (
        "org/other-model", "w2", "org/other-model")
    assert validate_structure(doc, names) == []
    assert validate_structure(doc, DEFAULT_NAMES) != []


def _swap_scored_before_rl(doc):
    stages = doc["stages"]
    stages[3], stages[4] = stages[4], stages[3]


def _set(path: list, value):
    def change(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


BROKEN = [
    ("a stage refers to a later stage", _swap_scored_before_rl, "@rl, which is not an earlier stage"),
    ("a stage refers to an unknown stage", _set(["stages", 3, "config", "warmStartModelId"], "@sftt"),
     "@sftt, which is not an earlier stage"),
    ("a model taken from an evaluate stage", _set(["stages", 2, "model"], "@base-scored"),
     "an evaluate stage"),
    ("two stages share a name", _set(["stages", 2, "name"], "sft"), "unique, non-empty name"),
    ("an unknown stage type", _set(["stages", 1, "type"], "distill"), "is not one of evaluate, train"),
    ("an eval stage on the wrong dataset", _set(["stages", 0, "dataset"], "spider-train"),
     "is not the eval dataset"),
    ("a grader of another bundle", _set(["stages", 4, "grader"], "bundle:other/grader"),
     "is not bundle 'spider-scoring'"),
    ("a reward term of another bundle", _set(["stages", 3, "config", "reward", "terms", 0, "bundle"], "x"),
     "reward term 0 names bundle 'x'"),
    ("a train stage on an unregistered dataset", _set(["stages", 1, "config", "dataset"], "mine"),
     "config.dataset 'mine'"),
    ("another base model", _set(["baseModel"], "org/m"), "baseModel is 'org/m'"),
    ("another workload", _set(["workload"], "w"), "workload is 'w'"),
    ("not a pipeline", _set(["kind"], "run"), "the trainer expects \"pipeline\""),
    ("no stages", _set(["stages"], []), "non-empty \"stages\" list"),
]


@pytest.mark.parametrize("change, expected", [(c, e) for _, c, e in BROKEN], ids=[i for i, _, _ in BROKEN])
def test_structure_and_name_problems_are_found(change, expected):
    doc = copy.deepcopy(build_pipeline(PipelineParams()))
    change(doc)
    problems = validate_structure(doc, DEFAULT_NAMES)
    assert any(expected in p for p in problems), problems


def test_rl_passes_are_reported_as_the_reference_does(data):
    notes, problems = check_data(build_pipeline(PipelineParams()), Prepared(data.parent), DEFAULT_NAMES)
    assert problems == []
    assert any("320 prompts over 600 rows of rl.jsonl: 0.53 passes" in n for n in notes), notes
    notes, _ = check_data(build_pipeline(PipelineParams(rl_max_steps=150)), Prepared(data.parent), DEFAULT_NAMES)
    assert any("1200 prompts over 600 rows of rl.jsonl: 2.00 passes" in n for n in notes), notes


def test_estimate_is_chars_over_3_5_plus_template_tokens_as_in_prepare():
    assert estimate_tokens([{"role": "user", "content": "x" * 350}]) == 104
    assert estimate_tokens([{"role": "user", "content": "x" * 351}, {"role": "system", "content": ""}]) == 109


def test_a_prompt_too_long_for_grpo_names_its_line_and_the_length_needed(tmp_path):
    long_prompt = "t(" + "c, " * 450 + ")"  # 1353 chars: ~339 tokens, +64 completion > 384
    data = write_splits(tmp_path / "data", {"train": [chat("q")], "eval": [chat("q")],
                                           "rl": [chat("short"), chat(long_prompt)]})
    _, problems = check_data(build_pipeline(PipelineParams()), Prepared(data.parent), DEFAULT_NAMES)
    assert len(problems) == 1
    tokens = estimate_tokens(chat(long_prompt)["messages"][:2])
    assert f"rl.jsonl:2, ~{tokens} tokens" in problems[0]
    assert f"needs maxSeqLength >= {tokens + 64}, not 384" in problems[0]
    doc = build_pipeline(PipelineParams(rl_max_seq_length=tokens + 64))
    assert check_data(doc, Prepared(data.parent), DEFAULT_NAMES)[1] == []
    notes = validate(build_pipeline(PipelineParams()), DEFAULT_NAMES, Prepared(data.parent), lenient_lengths=True)
    assert any(n.startswith("warning: rl: 1 prompt(s)") for n in notes)


def test_an_sft_row_whose_answer_would_be_cut_is_a_problem(tmp_path):
    data = write_splits(tmp_path / "data", {"train": [chat("q", answer="SELECT " + "x, " * 1100)],
                                           "rl": [chat("q")], "eval": [chat("q")]})
    _, problems = check_data(build_pipeline(PipelineParams()), Prepared(data.parent), DEFAULT_NAMES)
    assert len(problems) == 1 and "sft: 1 row(s) of train.jsonl are longer than maxSeqLength 768" in problems[0]


def test_empty_missing_and_malformed_splits_are_named(tmp_path, data):
    (data / "rl.jsonl").write_text("")
    _, problems = check_data(build_pipeline(PipelineParams()), Prepared(data.parent), DEFAULT_NAMES)
    assert any("rl.jsonl has no rows" in p for p in problems)
    (data / "eval.jsonl").unlink()
    with pytest.raises(InputError, match=r"cannot read .*eval\.jsonl.*--skip-data-checks"):
        check_data(build_pipeline(PipelineParams()), Prepared(data.parent), DEFAULT_NAMES)
    (data / "eval.jsonl").write_text(json.dumps(chat("q")) + "\n\n{\"messages\": \"oops\"}\n")
    with pytest.raises(InputError, match=r"eval\.jsonl:3: not a chat row"):
        validate(build_pipeline(PipelineParams()), DEFAULT_NAMES, Prepared(data.parent))


def test_cli_writes_a_valid_byte_stable_file(data, capsys):
    out = data.parent
    assert cli.main(["pipeline", "--data", str(out)]) == 0
    first = (out / "pipeline.json").read_bytes()
    assert cli.main(["pipeline", "--data", str(out)]) == 0
    assert (out / "pipeline.json").read_bytes() == first
    assert "0.53 passes" in capsys.readouterr().out
    assert validate(json.loads(first), DEFAULT_NAMES, Prepared(data.parent)) != []  # notes, and no exception


def test_cli_flags_change_the_stages(data, capsys):
    out = data.parent
    assert cli.main(["pipeline", "--data", str(out), "--rl-max-steps", "20", "--bundle", "b9"]) == 0
    doc = json.loads((out / "pipeline.json").read_text())
    assert stage(doc, "rl")["config"]["maxSteps"] == 20
    assert stage(doc, "rl")["config"]["reward"]["terms"][0]["bundle"] == "b9"
    assert "160 prompts over 600 rows of rl.jsonl: 0.27 passes" in capsys.readouterr().out


def test_cli_refuses_to_write_an_invalid_descriptor(tmp_path, capsys):
    out = tmp_path / "out"  # no data folder
    assert cli.main(["pipeline", "--data", str(out)]) == InputError.exit_code
    assert "train.jsonl" in capsys.readouterr().err
    assert not (out / "pipeline.json").exists()
    assert cli.main(["pipeline", "--data", str(out), "--skip-data-checks"]) == 0
    assert (out / "pipeline.json").exists()


def test_cli_check_validates_an_edited_file(data, capsys):
    out = data.parent
    assert cli.main(["pipeline", "--data", str(out)]) == 0
    edited = json.loads((out / "pipeline.json").read_text())
    edited["stages"][3]["config"]["warmStartModelId"] = "@rl-scored"
    (out / "edited.json").write_text(json.dumps(edited))
    assert cli.main(["pipeline", "--data", str(out), "--check", str(out / "edited.json")]) == 3
    assert "@rl-scored, which is not an earlier stage" in capsys.readouterr().err
    assert cli.main(["pipeline", "--data", str(out), "--check", str(out / "pipeline.json")]) == 0
    (out / "broken.json").write_text("{")
    assert cli.main(["pipeline", "--check", str(out / "broken.json"), "--skip-data-checks"]) == 3
    assert "is not valid JSON" in capsys.readouterr().err


def test_hand_edited_numbers_of_the_wrong_type_are_named_not_crashed_on(data):
    doc = build_pipeline(PipelineParams())
    stage(doc, "rl")["config"]["maxSteps"] = "40"
    stage(doc, "sft")["config"]["maxSeqLength"] = 76.8
    _, problems = check_data(doc, Prepared(data.parent), DEFAULT_NAMES)
    assert "rl: config maxSteps must be whole numbers >= 0" in problems
    assert "sft: config maxSeqLength must be whole numbers >= 0" in problems
