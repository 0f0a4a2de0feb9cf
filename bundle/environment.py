"""Multi-turn SQL environment: the model explores the row's database with read-only queries, then
submits its answer, scored as the reward scores a one-shot completion (``scoring.episode``).

For TRL's ``GRPOTrainer(environment_factory=environment.trl_environment)``: one
``SpiderSQLEnvironment`` a rollout. TRL calls ``reset(**row)`` with the dataset row (the columns
``export --format trl`` writes: ``prompt``, ``ground_truth``, ``db_id``, ``extra_info``), offers its
public methods as tools (``query``, ``submit``), and reads ``get_reward()`` once the rollout ends.
A reward function ``trl_environment_reward`` reads the same environments, and scores the last
assistant message of a rollout that never called ``submit`` (a model that answers in text).

Trainers whose environments read the model's text rather than its tool calls (OpenRLHF's agent,
``openrlhf_agent.py``; SkyRL; NeMo Gym's Gymnasium routes in ``serve``) share the same episode with
tags: ``<query>SQL</query>`` explores, ``<answer>SQL</answer>`` answers (``scoring.episode.read_action``).

Entry points pickle as the other entry files' do (bundle_package.EntryPoint). Infrastructure
faults raise the bundle's typed errors: the trainer records the rollout as failed (TRL: a tool
error the model sees, and ``get_reward`` None, which TRL leaves out of the reward).
"""

from __future__ import annotations

try:
    from . import bundle_package
    from .contract import errors as scoring_errors
    from .scoring import entry as scoring_entry
    from .scoring import episode as scoring_episode
except ImportError:  # loaded as a file with no parent package (verl's custom_reward_function.path)
    import importlib.util as _util
    import os as _os

    _spec = _util.spec_from_file_location("_spider_scoring_bundle_package",
                                          _os.path.join(_os.path.dirname(_os.path.realpath(__file__)), "bundle_package.py"))
    _loader = _util.module_from_spec(_spec)  # type: ignore[arg-type]
    _spec.loader.exec_module(_loader)  # type: ignore[union-attr]
    bundle_package = _loader.sibling(__file__, "bundle_package")
    scoring_errors = _loader.sibling(__file__, "contract.errors")
    scoring_entry = _loader.sibling(__file__, "scoring.entry")
    scoring_episode = _loader.sibling(__file__, "scoring.episode")

_entry_point = bundle_package.entry_point(__file__)

INSTRUCTIONS = scoring_episode.TOOL_INSTRUCTIONS


class SpiderSQLEnvironment:
    """One rollout's environment (TRL ``environment_factory``): ``reset``, two tools, ``get_reward``."""

    def __init__(self, root: str | None = None, caller: str = "reward") -> None:
        self._root, self._caller = root, caller
        self._episode: scoring_episode.Episode | None = None
        self.fault: str | None = None

    def reset(self, **row) -> str | None:
        """Start the episode of ``row`` (a dataset row: its gold and hints); nothing is added to the prompt."""
        self.fault = None
        self._episode = scoring_episode.Episode(row, root=self._root, caller=self._caller)
        return None

    def query(self, sql: str) -> str:
        """Run one read-only SQLite query on the question's database and see its first rows.

        Args:
            sql: One SQLite SELECT statement.

        Returns:
            The number of rows, the column names and the first rows, or the error.
        """
        try:
            return self._started().explore(sql)
        except scoring_errors.ScoringInfrastructureError as exc:
            self.fault = str(exc)
            raise

    def submit(self, sql: str) -> str:
        """Submit the final SQLite query that answers the question; this ends the episode.

        Args:
            sql: The final SQLite SELECT statement.

        Returns:
            That the answer was recorded.
        """
        try:
            self._started().submit(sql)
        except scoring_errors.ScoringInfrastructureError as exc:
            self.fault = str(exc)
            raise
        return "answer recorded; the episode is over"

    def get_reward(self) -> float | None:
        """What the bundle's reward pays for the submitted answer (no answer: what it pays for none);
        None for an episode a fault left unscored."""
        if self.fault is not None or self._episode is None:
            return None
        found = self._episode.answer or self._episode.unanswered()
        return found.value

    @property
    def episode(self) -> scoring_episode.Episode | None:
        return self._episode

    def _started(self) -> scoring_episode.Episode:
        if self._episode is None:
            raise scoring_errors.CallArgumentsError("the environment has no episode: call reset(**row) first")
        return self._episode


@_entry_point
def trl_environment() -> SpiderSQLEnvironment:
    """TRL's ``environment_factory``: a fresh environment (the bundle this file belongs to, or
    ``TRAINER_BUNDLE_ROOT``)."""
    return SpiderSQLEnvironment()


@_entry_point
def trl_environment_reward(completions, environments=None, **columns) -> list:
    """TRL reward function over the rollouts' environments: the submitted answer's reward; where a
    rollout submitted nothing, its last assistant message scored as a one-shot completion; None
    where a fault left it unscored."""
    if environments is None:
        raise scoring_errors.CallArgumentsError("trl_environment_reward reads the environments TRL passes: "
                                                "train with environment_factory=environment.trl_environment")
    scores: list[float | None] = []
    for completion, env in zip(completions, environments):
        episode = env.episode
        if env.fault is not None or episode is None:
            scores.append(None)
        elif episode.answer is None:
            scores.append(episode.submit(scoring_entry.message_text(completion) or "").value)
        else:
            scores.append(episode.answer.value)
    return scores
