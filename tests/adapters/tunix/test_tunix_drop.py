"""skipped_groups="drop" against tunix's real GRPO loss: with the skipped groups' rows
masked, the loss and its gradient equal those of the batch holding only the kept groups,
for every loss_agg_mode (KL term on)."""

from __future__ import annotations

import numpy as np
import pytest

from advbudget.testing import rounding_tolerance

pytest.importorskip("tunix")  # its own environment: make test-tunix

from .conftest import TUNIX_WARNINGS

pytestmark = TUNIX_WARNINGS

MODES = (
    "token-mean",
    "sequence-mean-token-mean",
    "sequence-mean-token-scale",
    "seq-mean-token-sum",
    "sequence-mean-token-sum-norm",
)


def test_drop_equals_the_kept_only_batch_for_every_loss_agg_mode():
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from tunix.models.dummy_model_creator import create_dummy_model
    from tunix.models.qwen3 import model as qwen3
    from tunix.rl import algo_core
    from tunix.rl.grpo.grpo_learner import GRPOConfig, TrainExample

    from advbudget.adapters.tunix import advantages_and_valid, drop_skipped_rows

    jax.config.update("jax_enable_x64", False)
    config = qwen3.ModelConfig(
        num_layers=1, vocab_size=50, embed_dim=16, hidden_dim=32, num_heads=2, head_dim=8,
        num_kv_heads=1, rope_theta=10_000, norm_eps=1e-6, use_tied_embedding=True,
    )  # fmt: skip
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    model = create_dummy_model(qwen3.Qwen3, config, mesh=mesh, random_seed=1)

    g, length = 4, 6
    rewards = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0, 1, 1])
    advantages, valid = advantages_and_valid("reward_budget", rewards, g)
    assert valid.tolist() == [False] * 4 + [True] * 4 + [False] * 4 + [True] * 4
    rng = np.random.default_rng(0)
    n = rewards.shape[0]
    completion = rng.integers(3, 50, size=(n, length))
    mask = np.ones((n, length), dtype=bool)
    for row, keep in enumerate(rng.integers(2, length + 1, size=n)):
        mask[row, keep:] = False
    completion = np.where(mask, completion, 0)

    def example(rows):
        return TrainExample(
            prompt_ids=jnp.asarray(rng_prompt[rows]),
            prompt_mask=jnp.ones((len(rows), 3), dtype=bool),
            completion_ids=jnp.asarray(completion[rows]),
            completion_mask=jnp.asarray(mask[rows]),
            ref_per_token_logps=jnp.asarray(ref[rows]),
            advantages=jnp.asarray(advantages[rows]),
            old_per_token_logps=jnp.asarray(old[rows]),
        )

    rng_prompt = rng.integers(3, 50, size=(n, 3))
    ref = rng.normal(-3.0, 0.1, size=(n, length)).astype(np.float32)
    old = rng.normal(-3.0, 0.1, size=(n, length)).astype(np.float32)
    everything = np.arange(n)
    kept = everything[valid]
    dropped = drop_skipped_rows(example(everything), valid)
    assert not np.asarray(dropped.completion_mask)[~valid].any()

    for mode in MODES:
        algo = GRPOConfig(num_generations=g, beta=0.04, loss_agg_mode=mode)
        algo.temperature = 1.0

        def loss(m, batch, algo=algo):
            return algo_core.grpo_loss_fn(m, batch, algo, pad_id=0, eos_id=1)[0]

        got, got_grad = nnx.value_and_grad(loss)(model, dropped)
        want, want_grad = nnx.value_and_grad(loss)(model, example(kept))
        full = loss(model, example(everything))
        # float32 sums over the batch's tokens, ordered by its shape: their rounding
        terms = n * (3 + length)
        np.testing.assert_allclose(
            got, want, rtol=0, atol=rounding_tolerance(want, terms=terms), err_msg=mode
        )
        pairs = list(zip(jax.tree.leaves(got_grad), jax.tree.leaves(want_grad), strict=True))
        tolerance = max(rounding_tolerance(b, terms=terms) for _, b in pairs)
        for a, b in pairs:
            np.testing.assert_allclose(a, b, rtol=0, atol=tolerance, err_msg=mode)
        if mode != "sequence-mean-token-scale":  # a fixed norm: the same either way
            assert not np.isclose(full, want), mode  # keep differs: the test can fail


def test_drop_needs_our_estimator():
    pytest.importorskip("tunix")
    from advbudget.adapters.tunix import drop_skipped_rows

    class Example:
        completion_mask = np.ones((4, 2))

    with pytest.raises(ValueError, match=r"valid: expected one flag per completion row \(4\)"):
        drop_skipped_rows(Example(), np.ones(3, dtype=bool))
