"""NeMo Gym's own Gymnasium agent against the served bundle's ``/reset`` and ``/step``, in .venv-nemo-gym.

    .venv-nemo-gym/bin/python tests/nemo_gym_gymnasium_runner.py URL TOKEN TASKS.jsonl OUT.json

NeMo Gym 0.7's ``GymnasiumAgent.run`` (responses_api_agents/gymnasium_agent) drives each episode:
``/reset`` with the task row, then model turns and ``/step`` until terminated, carrying the cookies the
service sets. The model is a stub Responses server on 127.0.0.1 answering each episode's scripted
turns: tool calls (``query``, then ``submit``), tags in text (``<query>``, ``<answer>``), or a bare
answer. OUT.json gets, per episode, the agent's reward and the outputs it fed back to the model.
"""

from __future__ import annotations

import asyncio
import json
import sys
from urllib.parse import urlparse


def call(name: str, sql: str, n: int) -> dict:
    return {"type": "function_call", "name": name, "arguments": json.dumps({"sql": sql}), "call_id": f"call_{n}",
            "id": f"fc_{n}", "status": "completed"}


def message(text: str, n: int) -> dict:
    return {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def scripts(gold: str) -> dict[str, list[list[dict]]]:
    return {"tools": [[call("query", gold, 1)], [call("submit", gold, 2)]],
            "tags": [[message("<query>SELECT 1</query>", 1)], [message("<answer>SELECT 'no such answer'</answer>", 2)]],
            "bare": [[message(gold, 1)]]}


async def main(url: str, token: str, tasks_path: str, out: str) -> None:
    from aiohttp import web
    from fastapi import Request
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient
    from omegaconf import OmegaConf
    from responses_api_agents.gymnasium_agent.app import GymnasiumAgent, GymnasiumAgentConfig, GymnasiumAgentRunRequest

    turns: list[list[dict]] = []

    async def responses(request: web.Request) -> web.Response:
        await request.json()
        output = turns.pop(0) if turns else [message("", 99)]
        return web.json_response({"id": "resp", "created_at": 0, "model": "policy", "object": "response",
                                  "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "output": output})

    model = web.Application()
    model.router.add_post("/v1/responses", responses)
    runner = web.AppRunner(model)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    model_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    where = urlparse(url)
    servers = {"spider": {"resources_servers": {"spider": {"host": where.hostname, "port": f"{where.port}/t/{token}"}}},
               "policy": {"responses_api_models": {"policy": {"host": "127.0.0.1", "port": model_port}}}}
    client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=1),
                          global_config_dict=OmegaConf.create(servers))
    config = GymnasiumAgentConfig(host="127.0.0.1", port=1, entrypoint="app.py", name="spider_agent", max_steps=10,
                                  resources_server={"type": "resources_servers", "name": "spider"},
                                  model_server={"type": "responses_api_models", "name": "policy"})
    agent = GymnasiumAgent(config=config, server_client=client)
    episodes = []
    for line in open(tasks_path, encoding="utf-8"):
        task = json.loads(line)
        for kind, script in scripts(task["expected"]).items():
            turns[:] = [list(t) for t in script]
            request = Request({"type": "http", "method": "POST", "path": "/run", "headers": [], "query_string": b""})
            result = await agent.run(request, GymnasiumAgentRunRequest.model_validate(task))
            fed = [o.model_dump(mode="json") if hasattr(o, "model_dump") else o for o in result.response.output]
            episodes.append({"row_id": task["row_id"], "kind": kind, "reward": result.reward,
                             "terminated": result.terminated, "info": result.info,
                             "tool_outputs": [json.loads(o["output"]) for o in fed if o.get("type") == "function_call_output"],
                             "observations": [o["content"] for o in fed if o.get("role") == "user"]})
    await runner.cleanup()
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"episodes": episodes}, handle)


if __name__ == "__main__":
    arguments = sys.argv[1:5]
    del sys.argv[1:]  # NeMo Gym reads its configuration from the command line (Hydra overrides) on import
    asyncio.run(main(*arguments))
