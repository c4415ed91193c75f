"""``--advbudget.skipped_groups drop`` through OpenRLHF's real actor update.

One optimizer step of OpenRLHF's own ``ActorPPOTrainer.training_step`` (its
``PolicyLoss``, ``aggregate_loss``, KL loss, entropy term) with the normalisers of its own
``iter_grad_accum_global_norm``. The policy is OpenRLHF's ``Actor`` around a tiny random
Qwen3 (which casts the logits to float32, ``openrlhf/models/actor.py:266``: agreement to
float32 rounding), and a float64 bigram table (:class:`Float64Policy`: agreement to
float64 rounding). The strategy is a stand-in for DeepSpeed's engine only: ``backward``
scales the loss by 1/gas as DeepSpeed does, ``optimizer_step`` leaves the gradients to be
read.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("openrlhf")

import torch

import advbudget.adapters.openrlhf as adapter
from advbudget.adapters.openrlhf.testing import make_args, make_maker
from advbudget.testing import rounding_tolerance

from .conftest import OPENRLHF_WARNINGS
from .test_kappa import PROMPT, tiny_actor

pytestmark = OPENRLHF_WARNINGS

N = 4
# Rows per micro-batch: the whole batch and the kept groups' batch are 8 and 4
# micro-batches, one optimizer step each. OpenRLHF's normalisers are float32 totals / gas
# (openrlhf/utils/loss_utils.py:68-78): with gas a power of two they are exact, so the two
# updates agree to float64 rounding (with gas 7 vs 4 they differ at float32 rounding).
MICRO = 4
#: rewards per group: the odd groups are tied (skipped; group 5 at a graded value).
REWARDS = [
    [0.0, 1.0, 1.0, 0.0],
    [1.0, 1.0, 1.0, 1.0],
    [0.25, 0.5, 0.5, 1.0],
    [0.0, 0.0, 0.0, 0.0],
    [1.0, 0.0, 0.0, 0.0],
    [0.5, 0.5, 0.5, 0.5],
    [0.0, 0.75, 0.0, 1.0],
    [-1.0, -1.0, -1.0, -1.0],
]
ALL = list(range(len(REWARDS)))
KEPT = [0, 2, 4, 6]


class DeepSpeedStandIn:
    """DeepSpeed's engine as the actor uses it on one rank: the backward of ``loss / gas``."""

    ring_attn_group = None

    def __init__(self, args: Any, gas: int) -> None:
        self.args = args
        self.accumulated_gradient = gas

    def backward(self, loss: Any, model: Any, optimizer: Any) -> None:
        (loss / self.accumulated_gradient).backward()

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        pass

    def get_grad_norm(self, model: Any) -> float:
        return 0.0


class Float64Policy(torch.nn.Module):
    """A float64 policy with OpenRLHF ``Actor.forward``'s outputs: a bigram logit table
    (next-token logits by the previous token), the action tokens' log-probs (masked) and
    ``output.entropy`` over the positions."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.table = torch.nn.Parameter(torch.randn(64, 64, generator=g, dtype=torch.float64))

    def forward(self, sequences: Any, action_mask: Any, **kwargs: Any) -> Any:
        logp = torch.log_softmax(self.table[sequences[:, :-1]], dim=-1)
        taken = logp.gather(-1, sequences[:, 1:, None]).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1)
        width = action_mask.shape[1]
        return taken[:, -width:] * action_mask, SimpleNamespace(entropy=entropy)


def trainer_args(mode: str, agg: str, policy_loss: str) -> SimpleNamespace:
    args = make_args("reward_budget", N)
    args.advbudget = SimpleNamespace(skipped_groups=mode)
    args.algo.advantage.is_correction_level = "off"
    args.algo.advantage.is_correction_mode = "mask"
    args.algo.advantage.is_correction_gating = "ratio"
    args.algo.advantage.is_correction_threshold = (0.5, 5.0)
    args.algo.kl = SimpleNamespace(
        use_loss=True, init_coef=1e-2, estimator="k3", unbiased_gradient=False
    )
    args.actor = SimpleNamespace(
        eps_clip_low_high=(0.2, 0.28),
        dual_clip=None,
        loss_agg_mode=agg,
        policy_loss_type=policy_loss,
        aux_loss_coef=0.0,
        entropy_coef=1e-2,
    )
    args.train = SimpleNamespace(dynamic_batch_enable=False)
    return args


def rollout(groups: list[int], seed: int = 0) -> dict[str, Any]:
    """Every row of the given groups (fixed per row: same tokens, log-probs whichever
    groups are in the batch), prompt-major."""
    g = torch.Generator().manual_seed(seed)
    total = len(REWARDS) * N
    lengths = torch.randint(1, 7, (total,), generator=g)
    sequences = torch.randint(1, 64, (total, PROMPT + 6), generator=g)
    old = torch.randn(total, 6, generator=g, dtype=torch.float64) * 0.1 - 3.0
    base = old + torch.randn(total, 6, generator=g, dtype=torch.float64) * 0.05
    rows = torch.tensor([group * N + i for group in groups for i in range(N)])
    return {
        "rewards": torch.tensor(REWARDS, dtype=torch.float64).reshape(-1)[rows],
        "lengths": lengths[rows],
        "sequences": sequences[rows],
        "old": old[rows],
        "base": base[rows],
    }


def experiences(batch: dict[str, Any]) -> list[Any]:
    """OpenRLHF ``Experience`` micro-batches of :data:`MICRO` rows, a shuffled order."""
    from openrlhf.trainer.ppo_utils.experience import Experience

    total = len(batch["rewards"])
    order = torch.randperm(total, generator=torch.Generator().manual_seed(1))
    out = []
    for start in range(0, total, MICRO):
        rows = order[start : start + MICRO]
        width = int(batch["lengths"][rows].max())
        action_mask = torch.arange(width)[None, :] < batch["lengths"][rows][:, None]
        attention_mask = torch.cat(
            [torch.ones(len(rows), PROMPT, dtype=torch.long), action_mask.long()], dim=1
        )
        sequences = batch["sequences"][rows, : PROMPT + width] * attention_mask
        out.append(
            Experience(
                sequences=sequences,
                attention_mask=attention_mask,
                action_mask=action_mask,
                action_log_probs=batch["old"][rows, :width] * action_mask,
                base_action_log_probs=batch["base"][rows, :width] * action_mask,
                rewards=batch["rewards"][rows].clone(),
                kl=torch.zeros(len(rows), width, dtype=torch.float64),
                response_length=batch["lengths"][rows].double(),
                truncated=torch.zeros(len(rows), dtype=torch.bool),
                index=rows.tolist(),
                info={"reward": batch["rewards"][rows].clone()},
            )
        )
    return out


def one_update(actor: Any, args: Any, batch: list[Any]) -> tuple[dict[str, Any], list[Any]]:
    """OpenRLHF's advantage step (patched: ours) then one optimizer step of its actor:
    the gradient of every parameter, and each micro-batch's status."""
    from openrlhf.models import PolicyLoss
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer
    from openrlhf.utils.loss_utils import iter_grad_accum_global_norm

    adapter.compute_advantages_and_returns(make_maker(args), batch)
    trainer = object.__new__(ActorPPOTrainer)
    trainer.args = args
    trainer.strategy = DeepSpeedStandIn(args, gas=len(batch))  # one optimizer step
    trainer.actor = actor
    trainer.actor_optim = None
    trainer.actor_scheduler = SimpleNamespace(get_last_lr=lambda: [0.0])
    trainer.ema_model = None
    trainer.aux_loss = False
    trainer.actor_loss_fn = PolicyLoss(
        clip_eps_low=args.actor.eps_clip_low_high[0],
        clip_eps_high=args.actor.eps_clip_low_high[1],
        token_level_loss=args.actor.loss_agg_mode == "token-mean",
        policy_loss_type=args.actor.policy_loss_type,
    )
    actor.zero_grad()
    statuses = []
    pairs = iter_grad_accum_global_norm(
        batch, trainer.strategy, len(batch), lambda e: e.action_mask
    )
    for step, (experience, info) in enumerate(pairs):
        statuses.append(trainer.training_step(experience, 1.0, step, info))
    grads = {name: p.grad.clone() for name, p in actor.named_parameters() if p.grad is not None}
    return grads, statuses


@pytest.fixture(scope="module")
def patched():  # type: ignore[no-untyped-def]
    adapter.install()
    yield
    adapter.uninstall()


@pytest.mark.parametrize(
    ("agg", "policy_loss"),
    [("token-mean", "ppo"), ("seq-mean-token-mean", "ppo"), ("token-mean", "gspo")],
)
@pytest.mark.parametrize("policy", ["float64", "qwen3"])
def test_drop_gradient_equals_the_kept_groups_batch(
    patched: None, agg: str, policy_loss: str, policy: str
) -> None:
    """drop on the whole batch == keep on the batch of the kept groups only (policy loss,
    k3 KL loss and entropy term alike), and differs from keep on the whole batch."""
    actor = Float64Policy() if policy == "float64" else tiny_actor().double()
    dropped, statuses = one_update(
        actor, trainer_args("drop", agg, policy_loss), experiences(rollout(ALL))
    )
    kept, _ = one_update(actor, trainer_args("keep", agg, policy_loss), experiences(rollout(KEPT)))
    kept_all, _ = one_update(
        actor, trainer_args("keep", agg, policy_loss), experiences(rollout(ALL))
    )
    assert dropped
    assert dropped.keys() == kept.keys()
    # Each gradient sums over the batch's tokens: float64 rounding, float32 rounding where
    # OpenRLHF's Actor casts the logits (the tiny Qwen3).
    terms = len(ALL) * N * (PROMPT + 6)
    accumulation = torch.float64 if policy == "float64" else torch.float32
    tolerance = max(rounding_tolerance(g, terms=terms, dtype=accumulation) for g in kept.values())
    for name in dropped:
        torch.testing.assert_close(dropped[name], kept[name], rtol=0, atol=tolerance)
    # The tied groups' rows still move keep's gradient (KL, entropy, normaliser), far
    # beyond that tolerance: the comparison can fail.
    gap = max(float((dropped[k] - kept_all[k]).abs().max()) for k in dropped)
    assert gap > 100 * tolerance
    for status in statuses:  # no NaN metric from a micro-batch of dropped rows
        for value in status["metrics"].values():
            assert torch.isfinite(torch.as_tensor(value, dtype=torch.float64)).all()


def test_drop_zeroes_exactly_the_invalid_rows(patched: None) -> None:
    """The rows whose action_mask drop zeroes are the core's ``valid == False``: the tied
    groups' and, with nan_policy omit, a NaN reward's."""
    from advbudget import compute_advantages

    batch = rollout(ALL)
    batch["rewards"][1] = float("nan")  # a row of a kept group
    args = trainer_args("drop", "token-mean", "ppo")
    args.advbudget.nan_policy = "omit"
    micro = experiences(batch)
    before = [e.action_mask.clone() for e in micro]
    adapter.compute_advantages_and_returns(make_maker(args), micro)
    valid = compute_advantages(
        batch["rewards"], "reward_budget", group_size=N, nan_policy="omit"
    ).valid
    for experience, mask in zip(micro, before, strict=True):
        keep = valid[torch.tensor(experience.index)]
        assert torch.equal(experience.action_mask, mask & keep[:, None])
    assert sorted(
        i for e in micro for i, m in zip(e.index, e.action_mask, strict=True) if not m.any()
    ) == [
        1,
        *range(4, 8),
        *range(12, 16),
        *range(20, 24),
        *range(28, 32),
    ]


def test_keep_leaves_the_masks_alone(patched: None) -> None:
    micro = experiences(rollout(ALL))
    before = [e.action_mask.clone() for e in micro]
    adapter.compute_advantages_and_returns(
        make_maker(trainer_args("keep", "token-mean", "ppo")), micro
    )
    assert all(torch.equal(e.action_mask, m) for e, m in zip(micro, before, strict=True))


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_a_step_with_every_group_dropped_has_a_zero_gradient(patched: None, agg: str) -> None:
    """Every normaliser is 0 when nothing is kept: OpenRLHF alone gives 0/0 = NaN
    gradients; the guarded ``aggregate_loss`` gives 0 (training on an empty batch)."""
    actor = Float64Policy()
    grads, _ = one_update(
        actor, trainer_args("drop", agg, "ppo"), experiences(rollout([1, 3, 5, 7]))
    )
    assert grads
    assert all(torch.equal(g, torch.zeros_like(g)) for g in grads.values())


def test_guards_change_nothing_with_a_nonzero_normaliser(patched: None) -> None:
    import openrlhf.models.loss as loss_module
    from openrlhf.models.utils import masked_mean

    g = torch.Generator().manual_seed(0)
    loss = torch.randn(4, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(4, 5, generator=g) > 0.3
    for dim in (None, -1):
        assert torch.equal(
            loss_module.masked_mean(loss, mask, dim=dim), masked_mean(loss, mask, dim)
        )
    assert loss_module.masked_mean(loss, torch.zeros_like(mask), dim=None) == 0
    original = loss_module.aggregate_loss._advbudget_original
    for token_level in (True, False):
        kwargs = {"batch_num_tokens": torch.tensor(7.0), "global_batch_size": torch.tensor(3.0)}
        assert torch.equal(
            loss_module.aggregate_loss(loss, mask, token_level, 2, **kwargs),
            original(loss, mask, token_level, 2, **kwargs),
        )


# --advbudget.skipped_groups / --advbudget.max_generation_batches through OpenRLHF's real
# parser and checks (parse-only: nothing loads).
OURS = [
    "--advbudget.parse_only",
    "--actor.model_name_or_path", "Qwen/Qwen3-8B",
    "--algo.advantage.estimator", "reward_budget",
    "--rollout.n_samples_per_prompt", "8",
]  # fmt: skip


def parse(*flags: str) -> Any:
    from advbudget.adapters.openrlhf.__main__ import main

    return main([*OURS, *flags])


def test_skipped_groups_flags_parse() -> None:
    default = parse()
    assert default.advbudget.skipped_groups == "keep"
    assert default.algo.dynamic_filtering_enable is False
    assert parse("--advbudget.skipped_groups", "Drop").advbudget.skipped_groups == "drop"
    resample = parse(
        "--advbudget.skipped_groups", "resample",
        "--advbudget.max_generation_batches", "3",
        "--reward.remote_url", "/abs/reward.py",
    )  # fmt: skip
    assert resample.advbudget.skipped_groups == "resample"
    assert resample.advbudget.max_generation_batches == 3
    assert resample.algo.dynamic_filtering_enable is True  # OpenRLHF's checks ran on it
    default_rounds = parse(
        "--advbudget.skipped_groups", "resample", "--reward.remote_url", "/abs/reward.py"
    )
    assert default_rounds.advbudget.max_generation_batches == 10


def test_resample_meets_openrlhf_own_check() -> None:
    """OpenRLHF's filter needs rewards at generation time (train_ppo_ray.py:746-755)."""
    with pytest.raises(AssertionError, match="remote_rm_url or agent_func_path"):
        parse("--advbudget.skipped_groups", "resample")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--advbudget.skipped_groups", "skip"],
            "advbudget: --advbudget.skipped_groups: expected one of keep, drop, resample, "
            "got 'skip'",
        ),
        (
            ["--advbudget.skipped_groups", "resample", "--advbudget.max_generation_batches", "0"],
            "advbudget: --advbudget.max_generation_batches: expected an int >= 1, got '0'",
        ),
        (
            ["--advbudget.skipped_groups", "resample", "--advbudget.max_generation_batches", "x"],
            "advbudget: --advbudget.max_generation_batches: expected an int >= 1, got 'x'",
        ),
        (
            ["--advbudget.max_generation_batches", "2"],
            "advbudget: --advbudget.max_generation_batches bounds the rounds of "
            "--advbudget.skipped_groups resample, got it with --advbudget.skipped_groups keep",
        ),
        (
            ["--algo.advantage.estimator", "group_norm", "--advbudget.skipped_groups", "drop"],
            "advbudget: --advbudget.skipped_groups drop needs one of our estimators "
            "(--algo.advantage.estimator reward_budget or advbudget_NAME), got 'group_norm'",
        ),
    ],
)
def test_bad_skipped_groups_flags_fail_in_one_line(flags: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as info:
        parse(*flags)
    assert info.value.code == message
