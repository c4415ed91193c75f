"""The verl command lines of docs/guides/verl.md and docs/reproducing.md, as written, through
verl's own hydra composition, its legacy-key migration, its reward loader and its estimator
registry: a key verl does not know, or a reward verl would not load, fails here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")

from advbudget.adapters.verl.check_config import compose_config

DOCS = Path(__file__).resolve().parents[3] / "docs"


def _bash_blocks(page: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return [b.replace("\\\n", " ") for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def _overrides(block: str) -> list[str]:
    """The hydra overrides of a block: its key=value words, comments and `...` left out."""
    words = []
    for line in block.splitlines():
        words += shlex.split(line, comments=True)
    return [w for w in words if re.fullmatch(r"\+?[\w.]+=\S+", w)]


def _guide_block(needle: str, page: str = "guides/verl.md") -> list[str]:
    (block,) = [b for b in _bash_blocks(page) if needle in b]
    return _overrides(block)


def _reward_fn(overrides: list[str]) -> Any:
    from verl.experimental.reward_loop.reward_loop import migrate_legacy_reward_impl
    from verl.trainer.ppo.reward import get_custom_reward_fn

    return get_custom_reward_fn(migrate_legacy_reward_impl(compose_config(overrides)))


@pytest.mark.parametrize("keys", ["as written", "legacy top-level"])
def test_the_reward_block_loads_our_compute_score_with_its_options(keys: str) -> None:
    overrides = _guide_block("custom_reward_function.path")
    assert len(overrides) == 4
    if keys == "legacy top-level":
        overrides = [
            o.replace("reward.custom_reward_function", "custom_reward_function") for o in overrides
        ]
    reward = _reward_fn(overrides)
    assert reward is not None, "verl loaded no custom reward: the keys are not the ones it reads"
    import advbudget.rewards.verl

    assert reward.args[0] is advbudget.rewards.verl.compute_score
    assert reward.args[1] == {"method": "math_verify", "wrong": 0.0}
    assert reward("math_dapo", "so it is 1/2\nAnswer: \\frac{1}{2}", "0.5")["score"] == 1.0
    assert reward("math_dapo", "Answer: 41", "42")["score"] == 0.0  # wrong=0.0, not -1.0


def test_the_switch_and_the_recipe_compose_with_registered_estimators() -> None:
    from verl.trainer.ppo import core_algos

    import advbudget.adapters.verl as adapter

    adapter.register_estimators()
    commands = [
        _guide_block("verl.trainer.main_ppo"),
        _guide_block("verl.trainer.main_ppo", page="reproducing.md"),
    ]
    for overrides in commands:
        config = compose_config(overrides)
        core_algos.get_adv_estimator_fn(config.algorithm.adv_estimator)  # raises when unknown
    assert compose_config(commands[0]).algorithm.advbudget.budget == 1.0


def test_the_data_and_worker_lines_compose() -> None:
    data = compose_config(_guide_block("data.train_files="))
    assert data.data.train_files == "data/dapo/verl/train.parquet"
    hook = compose_config(_guide_block("VERL_USE_EXTERNAL_MODULES"))
    env = hook.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_USE_EXTERNAL_MODULES == "advbudget.adapters.verl"


def test_the_multi_turn_block_composes_with_the_keys_the_loop_test_sets() -> None:
    """The guide's multi-turn lines compose in verl's config, and they are the keys the
    multi-turn loop test sets (test_multi_turn_loop.py, through the harness's overrides)."""
    from .test_multi_turn_loop import multi_turn_overrides

    overrides = _guide_block("multi_turn.enable=True")
    config = compose_config(overrides)
    rollout = config.actor_rollout_ref.rollout
    assert rollout.multi_turn.enable is True
    assert rollout.multi_turn.format == "hermes"
    assert rollout.agent.default_agent_loop == "tool_agent"
    assert config.data.return_raw_chat is True
    keys = {word.split("=", 1)[0] for word in overrides}
    tested = {word.split("=", 1)[0] for word in multi_turn_overrides("tool_agent")}
    assert keys == tested - {"actor_rollout_ref.rollout.multi_turn.max_assistant_turns"}


def test_the_skipped_groups_block_composes_and_validates() -> None:
    """The guide's drop line, with the switch: verl composes it and our check takes it."""
    from advbudget.adapters.verl._skipped import skipped_groups
    from advbudget.adapters.verl.check_config import validate

    overrides = _guide_block("skipped_groups=drop")
    config = compose_config(
        [
            *overrides,
            "algorithm.adv_estimator=reward_budget",
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
        ]
    )
    validate(config)
    assert skipped_groups(config.algorithm) == "drop"
