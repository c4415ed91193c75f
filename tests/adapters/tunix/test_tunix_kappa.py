"""κ_eff in a real tunix GRPO run on CPU, with async rollout: tunix prepares the next
micro-batch while one trains, and a mini-batch is two micro-batches (gradient
accumulation) of one prompt each, two mini-batches a step. κ_eff must come from the rows
each update trained, scored with the weights just before and just after that update: the
test records what tunix trained and the weights around it, recomputes every rollout's
log-probs with its own float64 softmax, and compares with advbudget.metrics.kappa_eff."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from advbudget.testing import rounding_tolerance

pytest.importorskip("tunix")  # its own environment: make test-tunix

from .conftest import (
    TUNIX_WARNINGS,
    G,
    actor_params,
    every_third_all_equal,
    prompt_batches,
    tiny_cluster,
)

pytestmark = [pytest.mark.slow, TUNIX_WARNINGS]

STEPS = 4
KAPPA_EVERY = 2  # the 2nd and 4th updates: tunix's logged steps 1 and 3
TEMPERATURE = 0.9  # the loss divides the logits by it: so must κ_eff's passes


def _token_logps(cluster: Any, params: Any, example: Any) -> np.ndarray:
    """Each completion token's log-prob under ``params`` (0 off the completion mask): the
    model's logits, then a float64 log-softmax at the rollout temperature."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from tunix.rl import common

    graphdef, _, rest = nnx.split(cluster.actor_trainer.model, nnx.Param, ...)
    model = nnx.merge(graphdef, jax.tree.map(jnp.asarray, params), rest)
    pad, eos = cluster.rollout.pad_id(), cluster.rollout.eos_id()
    tokens, positions, attention, _ = common.process_ids(
        example.prompt_ids, example.completion_ids, pad, eos
    )
    logits, _ = model(tokens, positions, None, attention)
    length = example.completion_ids.shape[1]
    logits = np.asarray(logits[:, -length - 1 : -1], dtype=np.float64) / TEMPERATURE
    top = logits.max(axis=-1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
    ids = np.asarray(example.completion_ids)
    per_token = np.take_along_axis(logp, ids[..., None], axis=-1)[..., 0]
    return per_token * np.asarray(example.completion_mask)


def test_kappa_eff_of_each_update_with_async_rollout(tmp_path: Path) -> None:
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    from advbudget.adapters.tunix import AdvBudgetGRPOLearner
    from advbudget.metrics import kappa_eff, summarize

    cluster = tiny_cluster(
        tmp_path,
        max_steps=STEPS * 2,  # tunix counts optimizer steps: two mini-batches a step
        temperature=TEMPERATURE,
        own_rollout_mesh=True,
        mini_batch_size=2,
        train_micro_batch_size=1,
        rollout_micro_batch_size=1,
        compute_logps_micro_batch_size=1,
    )
    flushed: list[Any] = []
    cluster.with_external_metrics_logger(flushed.append)
    events: list[str] = []
    trained: list[dict[str, Any]] = []
    update_actor = cluster.update_actor

    def recording_update(train_ds: Any, eval_ds: Any, skip_jit: bool = False) -> None:
        events.append("train")
        before, steps = actor_params(cluster), cluster.actor_trainer.train_steps
        update_actor(train_ds, eval_ds, skip_jit)
        (example,) = train_ds
        trained.append(
            {
                "step": cluster.global_steps,
                "example": example,
                "before": before,
                "after": actor_params(cluster),
                "optimizer_steps": (steps, cluster.actor_trainer.train_steps),
            }
        )

    def recording_metric(**kwargs: Any) -> dict[str, Any]:
        events.append("generated")  # on tunix's data thread
        return {}

    cluster.update_actor = recording_update
    learner = AdvBudgetGRPOLearner(
        rl_cluster=cluster,
        algo_config=GRPOConfig(num_generations=G, beta=0.04, advantage_estimator="reward_budget"),
        reward_fns=[every_third_all_equal],
        metric_fns=[recording_metric],
        skipped_groups="drop",
        kappa_every=KAPPA_EVERY,
    )
    assert learner.can_enable_async_rollout
    learner.train(prompt_batches(STEPS, per_step=4))

    assert cluster.global_steps == STEPS
    assert len(trained) == STEPS * 4  # 4 micro-batches a step
    # tunix did generate a micro-batch while another trained ("train" is logged at the
    # start of an update): some update starts before its mini-batch's last generation
    mini_batches = "".join("g" if e == "generated" else "t" for e in events)
    assert "gtgt" in mini_batches, mini_batches

    logged = {
        b.global_steps: {k: v[0][0] for k, v in b.metrics.items() if "kappa_eff" in k}
        for b in flushed
        if b.mode == "train"
    }
    assert {step for step, metrics in logged.items() if metrics} == {1, 3}
    history = cluster._rl_metrics_logger.get_metric_history("advbudget", "kappa_eff/mean", "train")
    assert history.shape == (2,)
    assert np.all(np.isfinite(history))

    for step in (1, 3):
        calls = [call for call in trained if call["step"] == step]
        values, tokens = [], []
        for first, last in (calls[0:2], calls[2:4]):  # one optimizer step each
            # the weights move at the last micro-batch of a mini-batch only
            assert first["optimizer_steps"][0] == first["optimizer_steps"][1]
            assert last["optimizer_steps"][1] == last["optimizer_steps"][0] + 1
            for call in (first, last):
                example = call["example"]
                old = _token_logps(cluster, first["before"], example)
                new = _token_logps(cluster, last["after"], example)
                advantages = np.asarray(example.advantages, dtype=np.float64)
                values.append(kappa_eff(old.sum(-1), new.sum(-1), advantages, group_size=G))
                tokens += [old, new]
        expected = summarize(np.concatenate(values))
        got = logged[step]
        assert got["advbudget/kappa_eff/count"] == expected["count"] > 0
        # tunix scores in float32: each κ_eff sums 4 sequences' token log-probs
        length = tokens[0].shape[-1]
        tolerance = rounding_tolerance(np.concatenate(tokens), terms=4 * length, dtype=np.float32)
        for key in ("mean", "median", "min", "max"):
            np.testing.assert_allclose(
                got[f"advbudget/kappa_eff/{key}"], expected[key], atol=tolerance, err_msg=key
            )
        assert abs(expected["mean"]) > 1e-3  # the weights moved: a test that can fail
