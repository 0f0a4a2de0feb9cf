"""Split rows in the dataset formats of the trainers' own libraries (TRL, verl, NeMo Gym, OpenRLHF).

Each chat row of a split (harness.common.rows) becomes one dataset row:

* **TRL** (conversational prompt format): ``{"prompt": [system, user], "ground_truth": gold,
  "row_id": ..., "db_id": ...}``. ``GRPOTrainer`` passes every column to the reward function as a
  list, so the packed bundle's ``reward.trl_reward`` finds the gold in ``ground_truth`` and uses
  ``row_id`` and ``db_id`` as hints;
* **verl** (its RL parquet schema): ``{"data_source": "spider", "prompt": [system, user],
  "ability": "text-to-sql", "reward_model": {"style": "rule", "ground_truth": gold},
  "extra_info": {"row_id", "db_id", "split", "index"}}``; verl's reward managers call
  ``compute_score(data_source, solution_str, ground_truth, extra_info)`` with these fields;
* **NeMo Gym** (a resources server's task JSONL): ``{"responses_create_params": {"input": [system,
  user]}, "expected": gold, "row_id": ..., "split": ..., "db_id": ...}``; NeMo Gym sends the model
  the ``input`` and posts the task's fields back to ``serve``'s ``/verify`` with the model's
  ``response`` (harness.service.nemo_gym);
* **OpenRLHF** (``--data.input_key input --data.label_key label``): ``{"input": [system, user],
  "label": {"ground_truth", "row_id", "db_id"}}``; the bundle's ``openrlhf_agent.py`` reads the label
  when OpenRLHF resets an episode.

``db_id`` comes from the bundle's index (the staged ``bundle/data/index.json``) when given; it is
only a hint, the bundle also finds the database from the gold and the prompt.

>>> from harness.common.rows import SplitRow
>>> row = SplitRow("rl-00000", "rl", ({"role": "user", "content": "How many?"},
...                                    {"role": "assistant", "content": "SELECT count(*) FROM singer"}))
>>> trl_row(row, {"rl-00000": "concert_singer"})
{'prompt': [{'role': 'user', 'content': 'How many?'}], 'ground_truth': 'SELECT count(*) FROM singer', 'row_id': 'rl-00000', 'db_id': 'concert_singer'}
>>> verl_row(row, 0)["reward_model"]
{'style': 'rule', 'ground_truth': 'SELECT count(*) FROM singer'}
>>> nemo_gym_row(row)["responses_create_params"]
{'input': [{'role': 'user', 'content': 'How many?'}]}
"""

from __future__ import annotations

from collections.abc import Mapping

from harness.common.rows import SplitRow

FORMATS = ("trl", "verl", "nemo-gym", "openrlhf")
DATA_SOURCE = "spider"


def trl_row(row: SplitRow, db_ids: Mapping[str, str] | None = None) -> dict:
    """One TRL conversational-prompt row (see the module docstring)."""
    out = {"prompt": row.prompt, "ground_truth": row.gold, "row_id": row.id}
    db_id = (db_ids or {}).get(row.id)
    if db_id:
        out["db_id"] = db_id
    return out


def verl_row(row: SplitRow, index: int, db_ids: Mapping[str, str] | None = None,
             data_source: str = DATA_SOURCE) -> dict:
    """One verl RL row (see the module docstring); ``index`` is the row's position in the file."""
    extra = {"row_id": row.id, "split": row.split, "index": index}
    db_id = (db_ids or {}).get(row.id)
    if db_id:
        extra["db_id"] = db_id
    return {"data_source": data_source, "prompt": row.prompt, "ability": "text-to-sql",
            "reward_model": {"style": "rule", "ground_truth": row.gold}, "extra_info": extra}


def nemo_gym_row(row: SplitRow, db_ids: Mapping[str, str] | None = None) -> dict:
    """One NeMo Gym task (see the module docstring): the prompt as ``responses_create_params.input``."""
    out = {"responses_create_params": {"input": row.prompt}, "expected": row.gold, "row_id": row.id,
           "split": row.split}
    db_id = (db_ids or {}).get(row.id)
    if db_id:
        out["db_id"] = db_id
    return out


def openrlhf_row(row: SplitRow, db_ids: Mapping[str, str] | None = None) -> dict:
    """One OpenRLHF row (see the module docstring): the prompt as ``input``, the gold and hints as ``label``."""
    label = {"ground_truth": row.gold, "row_id": row.id}
    db_id = (db_ids or {}).get(row.id)
    if db_id:
        label["db_id"] = db_id
    return {"input": row.prompt, "label": label}


def trainer_rows(rows: list[SplitRow], fmt: str, db_ids: Mapping[str, str] | None = None) -> list[dict]:
    """Every row in format ``fmt`` (one of FORMATS), in split order."""
    if fmt == "trl":
        return [trl_row(r, db_ids) for r in rows]
    if fmt == "verl":
        return [verl_row(r, i, db_ids) for i, r in enumerate(rows)]
    if fmt == "nemo-gym":
        return [nemo_gym_row(r, db_ids) for r in rows]
    if fmt == "openrlhf":
        return [openrlhf_row(r, db_ids) for r in rows]
    raise ValueError(f"unknown trainer format {fmt!r}: one of {', '.join(FORMATS)}")


def db_ids_of(index: Mapping) -> dict[str, str]:
    """row id -> db_id, from a bundle index (``data/index.json``)."""
    return {str(r.get("id")): str(r.get("db_id")) for r in index.get("rows", []) if r.get("db_id")}
