"""Run verifiers' own evaluation of harness.verifiers_env offline, in the verifiers venv; print the rewards.

    .venv-verifiers/bin/python tests/verifiers_runner.py DATA ZIP ANSWERS.json ROLLOUTS OUT.jsonl

A stub chat-completions server on 127.0.0.1 answers each prompt with the answer ANSWERS.json gives for
its row (keyed by the last user message); ``run_eval`` (verifiers.v1.cli.eval.runner) drives the
``spider_sql`` taskset through it. Writes one JSON object per rollout to OUT.jsonl (verifiers takes
over stdout while it runs): row_id, ok, the ``spider`` reward (null where the rollout failed), the reply.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


async def main(data: str, zip_path: str, answers_path: str, rollouts: int, out: str) -> None:
    from aiohttp import web
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    import harness.verifiers_env as env_module

    assert env_module.__all__, "verifiers is not importable here"
    answers = json.loads(open(answers_path, encoding="utf-8").read())

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
        return web.json_response({"id": "cmpl", "object": "chat.completion", "created": 0, "model": body["model"],
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": answers[user]}}],
                                  "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        config = EvalConfig(env={"taskset": {"id": env_module.TASKSET_ID, "data": data, "split": "eval", "zip": zip_path},
                                 "agent": {"runtime": {"type": "subprocess"}, "harness": {"id": env_module.TASKSET_ID}}},
                            model="stub", client={"type": "eval", "base_url": f"http://127.0.0.1:{port}/v1",
                                                  "api_key_var": "STUB_API_KEY"},
                            num_rollouts=rollouts, push=False, rich=None, output_dir=tempfile.mkdtemp())
        episodes = await run_eval(config)
    finally:
        await runner.cleanup()
    with open(out, "w", encoding="utf-8") as handle:
        for episode in episodes:
            for trace in episode.traces:
                found = trace.rewards.get("spider")
                handle.write(json.dumps({"row_id": episode.task.data.row_id, "ok": bool(trace.ok),
                                         "reward": None if found is None else found.score,
                                         "reply": trace.last_reply}) + "\n")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
