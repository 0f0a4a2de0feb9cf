"""OpenRLHF's multi-turn agent over the bundle's episode: ``--train.agent_func_path <bundle>/openrlhf_agent.py``.

OpenRLHF (0.11) loads this file by path and takes its ``AgentExecutor``: a ``MultiTurnAgentExecutor``
whose ``AgentInstance`` runs one episode a sample (``scoring.episode``). The prompt tells the model
the tags (``scoring.episode.TAG_INSTRUCTIONS``, ``prepare --multi-turn tags``): a turn whose last tag
is ``<query>SQL</query>`` runs that query on the row's original database and the model reads the
result (a new user turn in ChatML, as Qwen's template writes it, when the prompt is ChatML); any other
turn is the answer (its ``<answer>`` tag, or the turn read as a one-shot completion), scored as the
reward scores it, and ends the episode. A turn after the episode's queries are used is its answer.

The label (``--data.label_key``; ``export --format openrlhf`` writes ``label``) is the row's gold and
hints: ``{"ground_truth", "db_id", "row_id"}``, or the gold alone as a string.

OpenRLHF's classes are imported when OpenRLHF asks for ``AgentExecutor`` (a module ``__getattr__``):
the file itself imports the standard library only, as every bundle file does. Rewards are floats
with ``item()`` (OpenRLHF calls it), so no tensor library is needed either.
"""

from __future__ import annotations

try:
    from .scoring import entry as scoring_entry
    from .scoring import episode as scoring_episode
except ImportError:  # loaded as a file with no parent package (OpenRLHF's agent_func_path)
    import importlib.util as _util
    import os as _os

    _spec = _util.spec_from_file_location("_spider_scoring_bundle_package",
                                          _os.path.join(_os.path.dirname(_os.path.realpath(__file__)), "bundle_package.py"))
    _loader = _util.module_from_spec(_spec)  # type: ignore[arg-type]
    _spec.loader.exec_module(_loader)  # type: ignore[union-attr]
    scoring_entry = _loader.sibling(__file__, "scoring.entry")
    scoring_episode = _loader.sibling(__file__, "scoring.episode")

_CHATML_TURN = "<|im_start|>"


class Reward(float):
    """A reward as OpenRLHF reads one (``.item()``), without a tensor library."""

    def item(self) -> float:
        return float(self)


class SpiderAgent:
    """One sample's episode: ``reset`` reads its row from the label, ``step`` reads one turn."""

    def __init__(self, *args, **kwargs) -> None:
        self.episode: scoring_episode.Episode | None = None
        self.chatml = False

    async def reset(self, states: dict, **kwargs) -> dict:
        label = states.get("label")
        row = dict(label) if isinstance(label, dict) else {"ground_truth": label}
        observation = states.get("observation") or ""
        row.setdefault("prompt", observation)
        self.chatml = _CHATML_TURN in observation
        self.episode = scoring_episode.Episode(row)
        return {"observation": observation}

    async def step(self, states: dict, **kwargs) -> dict:
        episode = self.episode
        if episode is None:
            raise scoring_entry.CallArgumentsError("step before reset: OpenRLHF resets each sample's agent first")
        shown, answer = episode.turn(states.get("action_text"))
        if answer is None:
            return {"rewards": Reward(0.0), "scores": Reward(0.0), "done": False,
                    "environment_feedback": self._feedback(shown or "")}
        value = answer.value
        if value is None:  # the bundle cannot score the row: it raised; never reached
            value = 0.0
        return {"rewards": Reward(value), "scores": Reward(answer.verdict.score or 0.0), "done": True,
                "environment_feedback": "", "extra_logs": {"spider_queries": float(episode.calls),
                                                           "spider_match": float(answer.verdict.score or 0.0)}}

    def _feedback(self, shown: str) -> str:
        body = f"<result>\n{shown}\n</result>"
        if self.chatml:
            return f"<|im_end|>\n<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"
        return f"\n{body}\n"


def __getattr__(name: str):
    """``AgentInstance`` and ``AgentExecutor``: OpenRLHF's classes, made on first use."""
    if name not in ("AgentInstance", "AgentExecutor"):
        raise AttributeError(name)
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

    class AgentInstance(SpiderAgent, AgentInstanceBase):
        def __init__(self, *args, **kwargs) -> None:
            SpiderAgent.__init__(self)

    class AgentExecutor(MultiTurnAgentExecutor):
        def __init__(self) -> None:
            super().__init__(AgentInstance)

    globals().update(AgentInstance=AgentInstance, AgentExecutor=AgentExecutor)
    return globals()[name]
