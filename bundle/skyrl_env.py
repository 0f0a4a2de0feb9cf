"""SkyRL's text environment over the bundle's episode (skyrl-gym's ``BaseTextEnv``).

    import skyrl_env                   # this file, loaded by path (importlib), in SkyRL's workers
    skyrl_env.register()               # skyrl_gym.register("spider_sql", entry_point=SpiderSQLEnv)

then give the dataset rows ``env_class: spider_sql``. SkyRL makes one environment an episode,
``skyrl_gym.make("spider_sql", env_config=..., extras=row)``: the row's gold is
``reward_spec.ground_truth`` (or ``ground_truth``), with ``db_id`` and a row id as hints, and
``max_turns`` the turns it allows. ``init(prompt)`` starts the episode (``scoring.episode``); each
``step(action)`` reads the model's turn with the tags (``TAG_INSTRUCTIONS``): a last ``<query>``
tag is explored and its result is the next user message, any other turn (or the last turn allowed,
or a query past the episode's budget) is the answer, scored as the reward scores it, and ends the
episode. SkyRL's own SQL environment pays -1 for a turn without its ``<think>`` format; this one pays
what the bundle's reward shape pays (``prepare --reward-shape skyrl-sql`` for SkyRL's values).

skyrl-gym is imported when the class is first asked for (a module ``__getattr__``): the file itself
imports the standard library only, as every bundle file does.
"""

from __future__ import annotations

try:
    from .scoring import episode as scoring_episode
except ImportError:  # loaded as a file with no parent package
    import importlib.util as _util
    import os as _os

    _spec = _util.spec_from_file_location("_spider_scoring_bundle_package",
                                          _os.path.join(_os.path.dirname(_os.path.realpath(__file__)), "bundle_package.py"))
    _loader = _util.module_from_spec(_spec)  # type: ignore[arg-type]
    _spec.loader.exec_module(_loader)  # type: ignore[union-attr]
    scoring_episode = _loader.sibling(__file__, "scoring.episode")

ENV_ID = "spider_sql"


def episode_row(extras: dict) -> dict:
    """The row an episode is scored on, from SkyRL's ``extras`` (the dataset row)."""
    spec = extras.get("reward_spec")
    gold = spec.get("ground_truth") if isinstance(spec, dict) else None
    row = {"ground_truth": gold if gold is not None else extras.get("ground_truth")}
    row.update({k: extras[k] for k in ("db_id", "row_id") if extras.get(k) is not None})
    return row


class SpiderTextEpisode:
    """The environment's logic, without skyrl-gym: what ``SpiderSQLEnv`` inherits."""

    def _start(self, env_config=None, extras: dict | None = None) -> None:
        self.extras = dict(extras or {})
        self.max_turns = int(self.extras.get("max_turns") or 0) or None
        self.turns = 0
        self.episode: scoring_episode.Episode | None = None

    def init(self, prompt):
        self.episode = scoring_episode.Episode({**episode_row(self.extras), "prompt": prompt})
        return prompt, {}

    def step(self, action: str) -> dict:
        episode = self.episode
        if episode is None:
            self.init(self.extras.get("prompt"))
            episode = self.episode
        assert episode is not None
        self.turns += 1
        shown, answer = episode.turn(action, last=self.max_turns is not None and self.turns >= self.max_turns)
        if answer is None:
            return {"observations": [{"role": "user", "content": f"<result>\n{shown}\n</result>"}], "reward": 0.0,
                    "done": False, "metadata": {"queries": episode.calls, "units": episode.steps}}
        return {"observations": [], "reward": answer.value, "done": True,
                "metadata": {"outcome": answer.verdict.outcome, "match": answer.verdict.score,
                             "queries": episode.calls, "sql": answer.verdict.sql}}


def __getattr__(name: str):
    """``SpiderSQLEnv``: skyrl-gym's ``BaseTextEnv`` with this file's episode, made on first use."""
    if name != "SpiderSQLEnv":
        raise AttributeError(name)
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    class SpiderSQLEnv(SpiderTextEpisode, BaseTextEnv):
        def __init__(self, env_config=None, extras: dict | None = None) -> None:
            BaseTextEnv.__init__(self)
            self._start(env_config, extras)

    globals()["SpiderSQLEnv"] = SpiderSQLEnv
    return SpiderSQLEnv


def register(env_id: str = ENV_ID) -> str:
    """Register ``SpiderSQLEnv`` with skyrl-gym under ``env_id`` (once a process); the id."""
    import skyrl_gym
    if env_id not in skyrl_gym.registry:
        skyrl_gym.register(id=env_id, entry_point=__getattr__("SpiderSQLEnv"))
    return env_id
