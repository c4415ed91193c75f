r"""SkyRL: the DAPO math environment, ``environment.env_class=advbudget_dapo``.

SkyRL scores a response in a skyrl-gym environment. Importing this module registers
:class:`DapoEnv` in skyrl-gym's registry as ``advbudget_dapo`` (the advbudget entry point
imports it in SkyRL's trainer, where the generator makes its environments). One step: the
response is graded against the row's ``reward_model.ground_truth`` (what ``advbudget data
prepare --format skyrl`` writes, as SkyRL's ``aime`` data does) by DAPO's rule: ``correct``
(1.0) if the last ``Answer:`` line is right, else ``wrong`` (-1.0, DAPO's); options from
``environment.skyrl_gym.advbudget_dapo`` (``method``: ``dapo`` or ``math_verify``).
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import register, registry

from advbudget.rewards._checks import as_ground_truth
from advbudget.rewards._grade import grade

__all__ = ["ENV_CLASS", "DapoEnv"]

ENV_CLASS = "advbudget_dapo"


class DapoEnv(BaseTextEnv):  # type: ignore[misc]
    r"""One-step math environment: the response's reward by DAPO's rule.

    Examples:
        >>> env = DapoEnv(extras={"reward_model": {"ground_truth": 34}})
        >>> env.step("...\nAnswer: 34")["reward"], env.step("Answer: 3")["reward"]
        (1.0, -1.0)
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        reward_model = (extras or {}).get("reward_model") or {}
        truth = as_ground_truth(reward_model.get("ground_truth"))
        if truth is None or not str(truth).strip():
            raise ValueError(
                f"reward_model: {ENV_CLASS} expected a row with reward_model.ground_truth, "
                f"got {reward_model!r}"
            )
        config = dict(env_config or {})
        self.ground_truth = str(truth)
        self.method = str(config.get("method", "dapo"))
        self.correct = float(config.get("correct", 1.0))
        self.wrong = float(config.get("wrong", -1.0))

    def step(self, action: str) -> BaseTextEnvStepOutput:
        graded = grade(str(action), self.ground_truth, self.method)
        return BaseTextEnvStepOutput(
            observations=[],
            reward=self.correct if graded.correct else self.wrong,
            done=True,
            metadata={"acc": bool(graded.correct)},
        )


if ENV_CLASS not in registry:  # a second import (a Ray worker's) keeps the first
    register(id=ENV_CLASS, entry_point=f"{__name__}:DapoEnv")
