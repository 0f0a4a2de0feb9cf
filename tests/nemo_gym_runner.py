"""NeMo Gym's own client against the served bundle, in the NeMo Gym venv (``make setup-nemo-gym``).

    .venv-nemo-gym/bin/python tests/nemo_gym_runner.py URL TOKEN TASKS.jsonl ANSWERS.json OUT.json

For each task line (``export --format nemo-gym``), as a rollout does: NeMo Gym's ``BaseVerifyRequest``
is built from the line and a Responses object holding the row's answer (ANSWERS.json, keyed by row
id), posted with NeMo Gym's ``ServerClient`` to ``/verify`` (the token in the path form), and the
answer read back as NeMo Gym's ``BaseVerifyResponse``; then ``/aggregate_metrics`` on the answers.
Writes ``{"verified": [...], "metrics": {...}}`` to OUT.json.
"""

from __future__ import annotations

import asyncio
import json
import sys
from urllib.parse import urlparse


async def main(url: str, token: str, tasks_path: str, answers_path: str, out: str) -> None:
    from nemo_gym.base_resources_server import BaseVerifyRequest, BaseVerifyResponse
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient, get_response_json, raise_for_status
    from omegaconf import OmegaConf

    where = urlparse(url)
    client = ServerClient(head_server_config=BaseServerConfig(host=where.hostname, port=1),
                          global_config_dict=OmegaConf.create(
                              {"spider": {"resources_servers": {"spider": {"host": where.hostname, "port": where.port}}}}))
    answers = json.loads(open(answers_path, encoding="utf-8").read())
    verified = []
    for index, line in enumerate(open(tasks_path, encoding="utf-8")):
        task = json.loads(line)
        response = {"id": f"resp_{index}", "created_at": 0, "model": "policy", "object": "response",
                    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                    "output": [{"type": "message", "id": f"msg_{index}", "role": "assistant", "status": "completed",
                                "content": [{"type": "output_text", "text": answers[task["row_id"]], "annotations": []}]}]}
        body = {**task, "response": response, "_ng_task_index": index, "_ng_rollout_index": 0}
        request = BaseVerifyRequest.model_validate(body)  # NeMo Gym's model of the request takes the row
        payload = {**request.model_dump(mode="json", exclude_none=True), **task, "_ng_task_index": index,
                   "_ng_rollout_index": 0}
        reply = await client.post(server_name="spider", url_path=f"/t/{token}/verify", json=payload)
        await raise_for_status(reply)
        answer = await get_response_json(reply)
        BaseVerifyResponse.model_validate(answer)  # and its model of the answer reads ours
        verified.append({k: answer.get(k) for k in ("row_id", "reward", "mask_sample", "failure_kind", "spider_match",
                                                     "spider_outcome", "spider_explanation", "spider_sql",
                                                     "_ng_task_index", "_ng_rollout_index")})
    reply = await client.post(server_name="spider", url_path=f"/t/{token}/aggregate_metrics",
                              json={"verify_responses": verified})
    await raise_for_status(reply)
    metrics = await get_response_json(reply)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"verified": verified, "metrics": metrics}, handle)


if __name__ == "__main__":
    arguments = sys.argv[1:6]
    del sys.argv[1:]  # NeMo Gym reads its configuration from the command line (Hydra overrides) on import
    asyncio.run(main(*arguments))
