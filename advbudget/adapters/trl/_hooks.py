"""Every private TRL symbol advbudget uses (TRL 1.13 to 1.16, transformers 5), in one table,
and the only code that touches them.

A TRL upgrade starts here: the shared adapter suite (``tests/adapters/contract``, run with
``ADVBUDGET_FRAMEWORK=trl``) resolves each record of :data:`HOOKS` in the installed TRL and
compares its signature, so what moved fails in one list, and checks that no other module of
the adapter names a private TRL symbol.

Nothing is patched: :class:`TrainerHooks` overrides ``GRPOTrainer``'s private methods in the
subclass only, and the functions below read or write TRL's state of one trainer. ``mirrors``
is the TRL line the code answers: an override's or a call's ``def``, the line TRL hands a
symbol over, or the line that sets an attribute. trl is imported only when a function runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .._hooks import Hook

_GRPO = "trl.trainer.grpo_trainer"
_AT = "trl/trainer/grpo_trainer.py:"


def _attribute(attribute: str, line: int, use: str = "read") -> Hook:
    """An instance attribute that ``GRPOTrainer.__init__`` sets at ``line``."""
    return Hook(_GRPO, "GRPOTrainer.__init__", None, f"{_AT}{line}", use, attribute=attribute)


HOOKS: tuple[Hook, ...] = (
    # The subclass takes GRPOTrainer's arguments as they are (and reads `args`, the third).
    Hook(
        _GRPO,
        "GRPOTrainer.__init__",
        "(self, model: 'str | PreTrainedModel | PeftModel', reward_funcs: str | "
        "transformers.modeling_utils.PreTrainedModel | collections.abc.Callable[..., "
        "list[float | None]] | list[str | transformers.modeling_utils.PreTrainedModel | "
        "collections.abc.Callable[..., list[float | None]]] | None = None, args: "
        "trl.trainer.grpo_config.GRPOConfig | None = None, train_dataset: "
        "datasets.arrow_dataset.Dataset | datasets.iterable_dataset.IterableDataset | None = "
        "None, eval_dataset: datasets.arrow_dataset.Dataset | "
        "datasets.iterable_dataset.IterableDataset | datasets.dataset_dict.DatasetDict | "
        "datasets.dataset_dict.IterableDatasetDict | dict[str, datasets.arrow_dataset.Dataset "
        "| datasets.iterable_dataset.IterableDataset] | None = None, processing_class: "
        "transformers.tokenization_utils_base.PreTrainedTokenizerBase | "
        "transformers.processing_utils.ProcessorMixin | None = None, "
        "reward_processing_classes: transformers.tokenization_utils_base."
        "PreTrainedTokenizerBase | list[transformers.tokenization_utils_base."
        "PreTrainedTokenizerBase] | None = None, callbacks: list[transformers.trainer_callback."
        "TrainerCallback] | None = None, optimizers: tuple[torch.optim.optimizer.Optimizer | "
        "None, torch.optim.lr_scheduler.LambdaLR | None] = (None, None), quantization_config: "
        "'BitsAndBytesConfig | None' = None, peft_config: 'PeftConfig | None' = None, tools: "
        "list[collections.abc.Callable] | None = None, rollout_func: collections.abc.Callable["
        "[list[str], 'GRPOTrainer'], dict[str, typing.Any]] | None = None, "
        "environment_factory: collections.abc.Callable[[], trl.trainer.grpo_trainer."
        "_SupportsReset] | dict[str, collections.abc.Callable[[], trl.trainer.grpo_trainer."
        "_SupportsReset]] | None = None)",
        f"{_AT}302",
        "subclass",
    ),
    # The overrides (TrainerHooks). TRL has no advantage hook (trl issue #4525): the reward
    # step hands over the rewards of every process, [global B, n_funcs], NaN for None; the
    # generation step's output dict (advantages, completion_mask, num_items_in_batch,
    # prompt_ids, ...) is rewritten before TRL shuffles and splits it.
    Hook(
        _GRPO,
        "GRPOTrainer._calculate_rewards",
        "(self, inputs, prompts, completions, completion_ids_list)",
        f"{_AT}1579",
        "override",
    ),
    Hook(
        _GRPO,
        "GRPOTrainer._generate_and_score_completions",
        "(self, inputs: list[dict[str, torch.Tensor | typing.Any]]) -> "
        "dict[str, torch.Tensor | typing.Any]",
        f"{_AT}2324",
        "override",
    ),
    # skipped_groups="drop": the per-sequence losses' normaliser. TRL's public compute_loss
    # must call it (a patched trainer whose compute_loss is not TRL's is refused).
    Hook(_GRPO, "GRPOTrainer._compute_loss", "(self, model, inputs)", f"{_AT}3020", "override"),
    Hook(
        _GRPO,
        "GRPOTrainer.compute_loss",
        "(self, model, inputs, return_outputs=False, num_items_in_batch=None)",
        f"{_AT}2939",
        "read",
    ),
    _attribute("beta", 983, "write"),  # scaled with the advantages while the loss runs
    _attribute("loss_type", 819),
    # Resume: the adapter's counters, from the checkpoint folder.
    Hook(
        "transformers.trainer",
        "Trainer._load_from_checkpoint",
        "(self, resume_from_checkpoint: str, model: torch.nn.modules.module.Module | None = "
        "None) -> None",
        "transformers/trainer.py:3654",
        "override",
    ),
    # Rewards and groups: TRL's weighted sum, and its group sizes in train and eval.
    _attribute("reward_weights", 574),
    _attribute("multi_objective_aggregation", 820),
    _attribute("num_generations", 783),
    _attribute("num_generations_eval", 787),
    # Metrics: TRL averages {"train"|"eval": {key: [values]}} at each logging step; its
    # completions log keeps the last generation batch's advantages (a deque, all processes).
    _attribute("_metrics", 1080, "write"),
    _attribute("_logs", 1088, "write"),
    # Our reward functions call it as the `log_metric` keyword TRL passes them.
    Hook(_GRPO, "GRPOTrainer._log_metric", "(self, name: str, value: float)", f"{_AT}1594", "call"),
    # κ_eff: TRL's forward pass, and its micro-step counter (a generation batch is done when
    # TRL's _prepare_inputs would generate anew).
    Hook(
        _GRPO,
        "GRPOTrainer._get_per_token_logps_and_entropies",
        "(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, "
        "compute_entropy=False, compute_aux_loss=False, pixel_values=None, "
        "image_grid_thw=None, num_images=None, pixel_attention_mask=None, "
        "spatial_shapes=None, num_tiles=None, image_sizes=None, token_type_ids=None, "
        "mm_token_type_ids=None, image_position_ids=None) -> tuple[torch.Tensor, "
        "torch.Tensor | None, torch.Tensor | None]",
        f"{_AT}1419",
        "call",
    ),
    _attribute("_step", 948),
    _attribute("num_iterations", 944),
    # skipped_groups="resample": more prompts from TRL's train loader and sampler (its
    # get_train_dataloader and _get_train_sampler), padded with its tokenizer's pad id.
    Hook(
        "trl.trainer.utils",
        "RepeatSampler",
        "(data_source: collections.abc.Sized, mini_repeat_count: int, batch_size: int = 1, "
        "repeat_count: int = 1, shuffle: bool = True, seed: int | None = None)",
        f"{_AT}1309",
        "call",
    ),
    _attribute("shuffle_dataset", 860),
    Hook(
        "transformers.trainer",
        "Trainer.__init__",
        None,
        "transformers/trainer.py:627",
        "read",
        attribute="_train_batch_size",
    ),
    _attribute("_tokenizer", 381),
)


class TrainerHooks:
    """``GRPOTrainer``'s private methods, each handed to a public method of
    ``AdvBudgetGRPOTrainer`` (:mod:`._trainer`), which lists this class first in its bases:
    ``super()`` here is the ``GRPOTrainer`` it subclasses (TRL's, or Unsloth's)."""

    def _calculate_rewards(
        self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any
    ) -> Any:
        rewards_per_func = super()._calculate_rewards(  # type: ignore[misc]
            inputs, prompts, completions, completion_ids_list
        )
        self.after_rewards(rewards_per_func)  # type: ignore[attr-defined]
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        return self.generate_and_score_completions(inputs)  # type: ignore[attr-defined, no-any-return]

    def trl_generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        """TRL's own generation and scoring of this process's ``inputs``."""
        return super()._generate_and_score_completions(inputs)  # type: ignore[misc, no-any-return]

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        return self.grpo_loss(model, inputs)  # type: ignore[attr-defined]

    def trl_grpo_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        """TRL's own loss of one micro-batch."""
        return super()._compute_loss(model, inputs)  # type: ignore[misc]

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        super()._load_from_checkpoint(resume_from_checkpoint, model)  # type: ignore[misc]
        self.after_load(resume_from_checkpoint)  # type: ignore[attr-defined]


def metrics_store(trainer: Any) -> dict[str, dict[str, list[float]]]:
    """TRL's metrics of the current logging window: mode -> key -> values (TRL logs their
    mean, with an ``eval_`` prefix in eval, then clears them)."""
    store: dict[str, dict[str, list[float]]] = trainer._metrics
    return store


def logged_advantages(trainer: Any) -> Any:
    """The advantages of TRL's completions log: a deque of the last generation batch, every
    process's, which TRL has just extended with its own."""
    return trainer._logs["advantages"]


def pad_token_id(trainer: Any) -> int:
    """The pad id TRL pads its prompts and completions with."""
    return int(trainer._tokenizer.pad_token_id)


def per_token_logps(
    trainer: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, batch_size: int
) -> Any:
    """The policy's log-probs of the last ``logits_to_keep`` tokens, [B, logits_to_keep],
    through TRL's own forward pass (a patched trainer's, such as Unsloth's, included)."""
    logps, _, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size
    )
    return logps


def generation_batch_done(trainer: Any) -> bool:
    """Whether the optimizer has stepped on the whole current generation batch: TRL's
    ``_prepare_inputs`` generates anew when its micro-step counter is a multiple of this."""
    generate_every = trainer.args.steps_per_generation * trainer.num_iterations
    return bool(trainer._step % generate_every == 0)


def prompt_loader(trainer: Any, seed: int) -> Any:
    """TRL's train loader (its ``RepeatSampler``, its batch size, prepared by accelerate)
    with another ``seed`` and each generation batch once: a second prompt stream, the same
    on every process."""
    import torch
    from trl.trainer.utils import RepeatSampler

    args, group = trainer.args, trainer.num_generations
    sampler = RepeatSampler(
        data_source=trainer.train_dataset,
        mini_repeat_count=group,
        batch_size=args.generation_batch_size // group,
        shuffle=trainer.shuffle_dataset,
        seed=seed,
    )
    loader = torch.utils.data.DataLoader(
        trainer.train_dataset,
        batch_size=trainer._train_batch_size * args.steps_per_generation,
        sampler=sampler,
        collate_fn=trainer.data_collator,
    )
    return trainer.accelerator.prepare(loader)


@contextlib.contextmanager
def beta_scaled(trainer: Any, factor: float) -> Iterator[None]:
    """TRL's KL coefficient times ``factor`` for the duration (its loss reads ``self.beta``)."""
    beta = trainer.beta
    trainer.beta = beta * factor
    try:
        yield
    finally:
        trainer.beta = beta
