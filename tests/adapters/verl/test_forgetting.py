"""spo's ``rho="kl"`` in verl's V1 trainer modes (:mod:`advbudget.adapters.verl._forgetting`),
on an in-memory TransferQueue and an actor whose log-probs are known: what is kept, what the
actor scores again and where, hand-computed drifts and ρ. The real loop (test_loop.py, runs
G and H) runs it through verl's trainer, workers and TransferQueue."""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

import torch
from omegaconf import OmegaConf
from tensordict import NonTensorStack, TensorDict

from advbudget.adapters._features import LastResponses
from advbudget.adapters.verl._forgetting import RESCORE_PARTITION, forgetting
from advbudget.core import spo_rho

PROMPT = 3  # prompt tokens of every sample


def log_prob(position: int, version: int) -> float:
    """The fake actor's log-prob of the token at ``position`` after ``version`` updates:
    each update lowers every token's by 0.01, so a kept response drifts by 0.01 an update;
    a comparison of misaligned tokens would drift by 0.1 a position."""
    return -(0.1 * position + 0.01 * version)


class FakeTransferQueue:
    """TransferQueue's kv_* calls on dicts: partition -> key -> the sample's fields."""

    def __init__(self) -> None:
        self.partitions: dict[str, dict[str, dict[str, Any]]] = {}

    def put_sample(self, partition: str, key: str, fields: dict[str, Any]) -> None:
        self.partitions.setdefault(partition, {})[key] = dict(fields)

    def kv_batch_put(
        self, keys: list[str], partition_id: str, fields: Any = None, tags: Any = None
    ) -> Any:
        from transfer_queue.metadata import KVBatchMeta

        for i, key in enumerate(keys):
            self.put_sample(partition_id, key, {name: fields[name][i] for name in fields.keys()})  # noqa: SIM118
        return KVBatchMeta(keys=list(keys), tags=list(tags), partition_id=partition_id)

    def kv_batch_get(
        self, keys: list[str], partition_id: str, select_fields: list[str] | None = None
    ) -> TensorDict:
        rows = [self.partitions[partition_id][key] for key in keys]
        names = select_fields or list(rows[0])
        out: dict[str, Any] = {}
        for name in names:
            values = [row[name] for row in rows]
            if isinstance(values[0], torch.Tensor) and values[0].ndim == 1:
                out[name] = torch.nested.as_nested_tensor(values, layout=torch.jagged)
            elif isinstance(values[0], torch.Tensor):
                out[name] = torch.stack(values)
            else:
                out[name] = NonTensorStack.from_list(values)
        return TensorDict(out, batch_size=len(rows))

    def kv_clear(self, keys: list[str], partition_id: str) -> None:
        for key in keys:
            del self.partitions[partition_id][key]


class FakeActor:
    """The actor worker group: ``compute_log_prob`` writes each sample's ``log_probs``
    (prompt + response, as verl's workers do) under the actor's current version."""

    def __init__(self, queue: FakeTransferQueue) -> None:
        self.queue, self.version, self.calls = queue, 0, []

    def compute_log_prob(self, meta: Any) -> Any:
        self.calls.append((meta.partition_id, list(meta.keys), dict(meta.extra_info)))
        for key in meta.keys:
            sample = self.queue.partitions[meta.partition_id][key]
            length = int(sample["input_ids"].shape[0])
            sample["log_probs"] = torch.tensor([log_prob(p, self.version) for p in range(length)])
        return meta


def sample(index: int, uid: str, response: int, masked_last: bool) -> dict[str, Any]:
    """One rollout of ``response`` tokens after a prompt of ``PROMPT``, its old log-probs
    those of version 0 (verl's shift: response token j is read at position PROMPT - 1 + j)."""
    mask = torch.ones(response)
    if masked_last:
        mask[-1] = 0
    return {
        "input_ids": torch.arange(PROMPT + response),
        "response_mask": mask,
        "old_log_probs": torch.tensor([log_prob(PROMPT - 1 + j, 0) for j in range(response)]),
        "index": torch.tensor(index),
        "uid": uid,
    }


class Batch:
    """A ``KVBatchMeta``'s keys, tags and partition, its samples put in ``queue``."""

    def __init__(self, queue: FakeTransferQueue, rows: list[tuple[int, bool]]) -> None:
        self.partition_id = "train"
        self.keys = [f"step_{i}" for i in range(len(rows))]
        self.tags = [{"is_padding": padding, "seq_len": 8} for _, padding in rows]
        for i, (index, _) in enumerate(rows):
            fields = sample(index, f"u{index}", response=2 + i % 3, masked_last=i % 2 == 1)
            queue.put_sample("train", self.keys[i], fields)


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> FakeTransferQueue:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import transfer_queue as tq
    fake = FakeTransferQueue()
    for name in ("kv_batch_put", "kv_batch_get", "kv_clear"):
        monkeypatch.setattr(tq, name, getattr(fake, name))
    return fake


def trainer(actor: FakeActor, micro_batch: int | None) -> Any:
    rollout = {"temperature": 0.7, "log_prob_use_dynamic_bsz": micro_batch is None}
    if micro_batch is not None:
        rollout["log_prob_micro_batch_size_per_gpu"] = micro_batch
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}})
    return SimpleNamespace(config=config, actor_rollout_wg=actor)


@pytest.mark.parametrize("micro_batch", [4, None])
def test_a_returning_prompt_is_scored_again_by_the_actor_as_it_is_now(
    queue: FakeTransferQueue, micro_batch: int | None
) -> None:
    """Step 1: three prompts (10, 11, 12; two rows each) and a padding row of verl's (no
    prompt: it keeps nothing): all first seen, ρ 0.96, nothing scored again. verl clears the step.
    Step 2, one update later: 10 returns, 13 is new. 10's last step-1 response (row 1, its
    last token masked) is put again in a partition of its own, padded with copies to the
    micro-batch, scored once with verl's log-prob settings, and cleared; its drift is the
    update's 0.01 on each of its unmasked tokens, its ρ clip(2^(-0.01/0.06), 0.875, 0.96)."""
    actor = FakeActor(queue)
    kept = LastResponses()
    first = Batch(queue, [(10, False), (10, False), (11, False), (11, False), (12, False),
                          (12, False), (10, True)])  # fmt: skip
    identities = [10, 10, 11, 11, 12, 12, None]  # as the trainer lends them
    rho, metrics = forgetting(trainer(actor, micro_batch), first, kept, identities)
    assert rho.tolist() == [0.96] * 7
    assert metrics == {
        "advbudget/spo_drift_mean": 0.0,
        "advbudget/spo_rho_mean": 0.96,
        "advbudget/spo_first_seen_fraction": 1.0,
    }
    assert actor.calls == []
    assert len(kept) == 3
    for key in first.keys:  # the end of verl's step
        del queue.partitions["train"][key]

    actor.version = 1
    second = Batch(queue, [(10, False), (10, False), (13, False), (13, False)])
    rho, metrics = forgetting(trainer(actor, micro_batch), second, kept, [10, 10, 13, 13])
    expected = float(spo_rho(np.array([0.01]))[0])
    assert 0.875 < expected < 0.96
    np.testing.assert_allclose(rho, [expected, expected, 0.96, 0.96], rtol=1e-6)
    assert metrics["advbudget/spo_drift_mean"] == pytest.approx(0.01 / 2, rel=1e-5)
    assert metrics["advbudget/spo_first_seen_fraction"] == 0.5
    ((partition, keys, extra),) = actor.calls
    assert partition == RESCORE_PARTITION
    assert len(keys) == (micro_batch or 1)  # one kept response, padded with its copies
    assert extra == {"calculate_entropy": False, "compute_loss": False, "temperature": 0.7}
    assert queue.partitions[RESCORE_PARTITION] == {}  # cleared
    assert all("log_probs" not in s for s in queue.partitions["train"].values())  # untouched


def test_the_kept_response_is_a_copy(queue: FakeTransferQueue) -> None:
    """A kept sample owns its tensors: writing into the step's rows after the step (verl
    reuses nothing, but a view would keep the whole batch alive) leaves it as it was."""
    actor = FakeActor(queue)
    kept = LastResponses()
    batch = Batch(queue, [(10, False), (10, False)])
    forgetting(trainer(actor, 2), batch, kept, [10, 10])
    queue.partitions["train"]["step_1"]["input_ids"].fill_(99)
    ((handle, _),) = kept._kept.values()
    assert handle.fields["input_ids"].tolist() != [99] * len(handle.fields["input_ids"])


def test_spo_and_rae_leave_verls_padding_rows_out() -> None:
    """verl pads a batch with no-op samples (reward 0) that copy the first real row's
    prompt; the trainer lends them no prompt, and an estimator with memory scores the real
    rows and updates the state as if the padding were not there: not a failure of that
    prompt, not in spo's batch z-score. A real NaN is still refused under 'raise'."""
    from advbudget import EstimatorState, compute_advantages
    from advbudget.adapters._features import RunMemory, lend_memory
    from advbudget.adapters.verl import estimator_function
    from advbudget.adapters.verl.testing import algorithm_config

    real = [1.0, 0.0, 1.0, 1.0]
    prompts = [10, 10, 11, 11]
    for name, core in (("advbudget_spo", "spo"), ("advbudget_rae", "rae")):
        memory = RunMemory()
        rewards = torch.tensor([[0.0, r] for r in [*real, 0.0, 0.0]])
        with lend_memory(memory, [*prompts, None, None]):
            token_advantages, _ = estimator_function(name)(
                token_level_rewards=rewards,
                response_mask=torch.ones(6, 2),
                index=np.array(["a", "a", "b", "b", "pad", "pad"], dtype=object),
                config=algorithm_config(name),
            )
        alone = EstimatorState()
        want = compute_advantages(
            np.array(real), core, group_ids=[0, 0, 1, 1], prompt_ids=prompts, state=alone
        )
        np.testing.assert_allclose(token_advantages[:4, 0].numpy(), want.advantages, rtol=1e-6)
        assert token_advantages[4:].abs().sum() == 0
        assert memory.estimator_state.state_dict() == alone.state_dict()

    rewards = torch.tensor([[0.0, r] for r in [1.0, float("nan"), 1.0, 0.0, 0.0]])
    with (
        lend_memory(RunMemory(), [10, 10, 11, 11, None]),
        pytest.raises(ValueError, match="NaN"),
    ):
        estimator_function("advbudget_spo")(
            token_level_rewards=rewards,
            response_mask=torch.ones(5, 2),
            index=np.array(["a", "a", "b", "b", "pad"], dtype=object),
            config=algorithm_config("advbudget_spo"),
        )
