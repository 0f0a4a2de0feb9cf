"""A verifiers environment (PyPI ``verifiers`` 0.4, prime-rl's): the prepared splits, the bundle's reward.

verifiers 0.4 (``verifiers.v1``) loads an environment by its taskset's id, a top-level module
exporting one ``Taskset`` subclass (and here a ``Harness``) in ``__all__``. Importing this module
registers it under the id ``spider_sql``::

    import harness.verifiers_env                # registers "spider_sql"
    env = {"taskset": {"id": "spider_sql", "data": "out", "split": "eval", "zip": "out/spider-scoring.zip"},
           "agent": {"runtime": {"type": "subprocess"}}}

* a task is a row of ``DATA/data/SPLIT.jsonl``: its prompt (system and user messages), its
  ``row_id``, ``db_id`` and gold;
* the harness asks the model once (a single turn);
* the reward, ``spider``, is the bundle's own: ``reward.compute_score`` of the packed zip (loaded as
  the trainer loads it), on the model's last reply, in a worker thread. A row the bundle cannot
  score raises, which verifiers records as the rollout's error: its ``spider`` reward stays None and
  the rollout is not ok, never a 0.0 (read ``trace.ok`` or ``trace.rewards["spider"]``, not
  ``trace.reward``, which verifiers sums as 0 there).

verifiers is optional and not installed with the harness: it conflicts with the ``openreward``
client of the [integration] group (``make setup-verifiers`` makes its own ``.venv-verifiers``).
Without it this module defines nothing (``__all__`` is empty).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from harness.common.layout import Prepared
from harness.common.rows import read_split
from harness.common.trainer_rows import db_ids_of

TASKSET_ID = "spider_sql"
_loaded: dict[str, Any] = {}
_lock = threading.Lock()


def bundle_reward(zip_path: str) -> Any:
    """The packed zip's ``reward.compute_score``, loaded once per process as the trainer loads it."""
    with _lock:
        if zip_path not in _loaded:
            from harness.common.bundle_loader import load_bundle
            _loaded[zip_path] = load_bundle(zip_path)
        return _loaded[zip_path].function("reward:compute_score")


def rows_of(data: str, split: str) -> list[dict[str, Any]]:
    """The split's rows as task fields: prompt, row_id, gold, db_id (from the staged index, when there)."""
    prepared = Prepared(Path(data))
    index = prepared.staged / "data" / "index.json"
    db_ids = db_ids_of(json.loads(index.read_text(encoding="utf-8"))) if index.is_file() else {}
    return [{"row_id": r.id, "prompt": list(r.prompt), "gold": r.gold, "db_id": db_ids.get(r.id, "")}
            for r in read_split(prepared.split(split), split)]


try:
    import httpx
    import verifiers.v1 as vf
except ImportError:  # verifiers is optional
    __all__: list[str] = []
else:
    class SpiderData(vf.TaskData):
        row_id: str
        gold: str
        db_id: str
        zip_path: str

    class SpiderTask(vf.Task[SpiderData]):
        @vf.stop
        async def single_turn(self, trace: vf.Trace) -> bool:  # verifiers reads the annotation
            return bool(trace.num_turns >= 1)

        @vf.reward(weight=1.0)
        async def spider(self, trace: vf.Trace) -> float:
            data = self.data
            compute_score = bundle_reward(data.zip_path)
            extra = {"row_id": data.row_id, **({"db_id": data.db_id} if data.db_id else {})}
            return float(await asyncio.to_thread(compute_score, solution_str=trace.last_reply or "",
                                                 ground_truth=data.gold, extra_info=extra))

    class SpiderConfig(vf.TasksetConfig):
        data: str = "out"
        split: str = "eval"
        zip: str = ""  # default: DATA/spider-scoring.zip
        limit: int | None = None

    class SpiderTaskset(vf.Taskset[SpiderTask, SpiderConfig]):
        def load(self) -> list[Any]:
            config = self.config
            zip_path = os.path.abspath(config.zip or str(Prepared(Path(config.data)).zip))
            return [SpiderTask(SpiderData(id=r["row_id"], prompt=r["prompt"], row_id=r["row_id"], gold=r["gold"],
                                          db_id=r["db_id"], zip_path=zip_path), config.task)
                    for r in rows_of(config.data, config.split)[:config.limit]]

    class SingleTurnHarness(vf.Harness[vf.HarnessConfig]):
        """One chat completion in this process (no program to launch, nothing to install)."""

        APPENDS_SYSTEM_PROMPT = True
        EXECUTES_CODE = False
        NEEDS_CONTAINER = False

        async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str, mcp_urls: Any,
                         data: Any, **_: Any) -> Any:
            system, prompt = self.resolve_prompt(data)
            messages = [m.model_dump(exclude_none=True) for m in prompt]
            if system:
                messages.insert(0, {"role": "system", "content": system})
            async with httpx.AsyncClient(timeout=600) as http:
                reply = await http.post(f"{endpoint}/chat/completions", headers={"Authorization": f"Bearer {secret}"},
                                        json={"model": ctx.model, "messages": messages})
            return vf.ProgramResult(exit_code=0 if reply.is_success else 1, stdout="", stderr=reply.text[-2000:])

    __all__ = ["SpiderTaskset", "SingleTurnHarness"]
    sys.modules.setdefault(TASKSET_ID, sys.modules[__name__])
