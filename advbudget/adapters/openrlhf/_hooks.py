"""Every OpenRLHF symbol the adapter patches, overrides or touches privately (openrlhf 0.11.2,
ray 2.55), in one table, and the only code that touches a private one.

An OpenRLHF upgrade starts here: ``tests/adapters/openrlhf/test_hooks.py`` resolves each
record of :data:`HOOKS` in the installed OpenRLHF and compares its signature, so what moved
fails in one list; no other module of the adapter names a private OpenRLHF or Ray symbol
(the same test checks that). ``mirrors`` is the line the code answers: a wrapped or called
function's ``def``, the import a module-level patch rebinds, or the line that sets an
attribute.

:func:`install` wraps the methods of :data:`PATCHED` (their wrappers: :data:`_WRAPPERS`):

- ``RemoteExperienceMaker.compute_advantages_and_returns``: for our estimator names
  (:func:`~advbudget.adapters.openrlhf.estimator_names`) it runs
  :func:`~advbudget.adapters.openrlhf.compute_advantages_and_returns`, for every other name
  OpenRLHF's own method, unchanged;
- ``BasePPOTrainer.ppo_train`` (the sync ``PPOTrainer`` and the async ``TrainingActor`` both
  inherit it): after the update, every ``--advbudget.kappa_every`` steps, adds
  ``advbudget/kappa_eff/*`` to the status OpenRLHF logs;
- ``BasePPOTrainer.save_logs_and_checkpoints`` / ``init_checkpoint_states``: the run's
  memory (:func:`._estimators.run_memory`: the prompt ledger, an estimator's state) into
  the checkpoint's ``client_states`` at the steps OpenRLHF saves, and back on resume;
- ``BasePPOTrainer.broadcast_to_vllm`` (the async ``TrainingActor`` calls it inside its
  vLLM lock), with ``ppo_train`` and ``init_checkpoint_states`` keeping the trainer's
  weights version: publishes the version of the weights sent to the engines
  (:mod:`._policy_versions`), which the generation stamps on each sample;
- ``BasePPOTrainer.__init__``: binds these wrappers on the trainer instance too. ``@ray.remote``
  copies every method, inherited ones included, onto the actor class when the class is
  decorated (ray 2.55: ``actor.py:2684`` ``_inject_tracing_into_class`` sets a tracing
  wrapper of each member from ``inspect.getmembers`` on the subclass,
  ``util/tracing/tracing_helper.py:512-572``). ``PPOTrainer`` is decorated while
  ``ppo_trainer.py`` executes, before the patch on import can run, so ``PPOTrainer.ppo_train``
  is a copy of OpenRLHF's original that shadows the patched base method, and the actor
  (unpickled from the driver's class) never runs the κ_eff pass. The instance attribute
  wins over both copies, whatever the import order and the driver did;
- the samples generator's vLLM generation: with dynamic filtering, our estimators and
  ``--advbudget.skipped_groups resample``, :func:`._resample.generate` (the estimator's skip
  rule, ``--advbudget.max_generation_batches``); else OpenRLHF's; with our estimators,
  each sample stamped with the policy version that generated it;
- ``aggregate_loss`` and ``masked_mean`` where OpenRLHF's loss code looks them up
  (``openrlhf.models.loss``, its re-export in ``openrlhf.models``,
  ``openrlhf.trainer.ray.ppo_actor``): a normaliser or mask sum
  of 0 becomes 1, so a step or micro-batch whose rows ``drop`` all masked gives a 0 loss
  and 0 metrics instead of 0/0 (NaN gradients). Any other value passes unchanged, and
  OpenRLHF never builds an empty mask itself, so ``keep`` runs bit for bit as before;
- ``DeepspeedStrategy.all_reduce``: a micro-step whose rows ``drop`` all masked on every
  rank (a step of stale samples only) reduces to 0 action tokens, which the actor's metric
  means divide by (``ppo_actor.py:219, 254``): the count becomes :data:`_NO_TOKENS`, so
  those means are 0 and every other count is unchanged in float64.

They run inside Ray actors (``PPOTrainer``, the model ranks), not the driver, so the patch
must be installed there: pass :data:`HOOK` as Ray's ``worker_process_setup_hook``::

    ray.init(runtime_env={"worker_process_setup_hook": HOOK})
    # or: ray job submit --runtime-env-json '{"worker_process_setup_hook":
    #      "advbudget.adapters.openrlhf.install"}' -- python3 -m advbudget.adapters.openrlhf ...

Nothing here imports OpenRLHF, Ray or torch until a function runs or OpenRLHF imports a
patched module.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.abc
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from .._hooks import Hook
from ._version import check_openrlhf_version

HOOK = "advbudget.adapters.openrlhf.install"

_MAKER = "openrlhf.trainer.ppo_utils.experience_maker"
_TRAINER = "openrlhf.trainer.ppo_trainer"
_GENERATOR = "openrlhf.trainer.ppo_utils.samples_generator"
_LOSS = "openrlhf.models.loss"
_MODELS = "openrlhf.models"
_ACTOR = "openrlhf.trainer.ray.ppo_actor"
_STRATEGY = "openrlhf.utils.deepspeed.deepspeed"
_EXPERIENCES = "List[openrlhf.trainer.ppo_utils.experience.Experience]"
_GROUP = "openrlhf.trainer.ray.launcher.RayActorGroup"
_NORMALISED = (
    "(loss: torch.Tensor, loss_mask: torch.Tensor, token_level_loss: bool = True, dp_size: "
    "int = 1, batch_num_tokens: Optional[float] = None, global_batch_size: Optional[float] = "
    "None) -> torch.Tensor"
)
_MASKED_MEAN = (
    "(tensor: torch.Tensor, mask: Optional[torch.Tensor], dim: int = None) -> torch.Tensor"
)

#: What :func:`install` wraps, in each module as OpenRLHF imports it. A module function is
#: wrapped in each module that looks it up by its global name: ``module`` is that module,
#: ``mirrors`` the import there.
PATCHED: tuple[Hook, ...] = (
    Hook(
        _MAKER,
        "RemoteExperienceMaker.compute_advantages_and_returns",
        f"(self, experiences: {_EXPERIENCES}) -> {_EXPERIENCES}",
        "openrlhf/trainer/ppo_utils/experience_maker.py:238",
        "wrap",
    ),
    Hook(
        _TRAINER,
        "BasePPOTrainer.ppo_train",
        "(self, global_steps: int) -> Dict",
        "openrlhf/trainer/ppo_trainer.py:266",
        "wrap",
    ),
    Hook(
        _TRAINER,
        "BasePPOTrainer.save_logs_and_checkpoints",
        "(self, global_step: int, logs_dict=None, client_states=None) -> None",
        "openrlhf/trainer/ppo_trainer.py:384",
        "wrap",
    ),
    Hook(
        _TRAINER,
        "BasePPOTrainer.init_checkpoint_states",
        "(self) -> Dict",
        "openrlhf/trainer/ppo_trainer.py:433",
        "wrap",
    ),
    Hook(
        _TRAINER,
        "BasePPOTrainer.__init__",
        "(self, strategy: openrlhf.utils.deepspeed.deepspeed.DeepspeedStrategy, "
        f"actor_model_group: {_GROUP}, critic_model_group: {_GROUP}, reward_model_group: "
        f"{_GROUP}, reference_model_group: {_GROUP}, vllm_engines, tokenizer) -> None",
        "openrlhf/trainer/ppo_trainer.py:151",
        "wrap",
    ),
    Hook(
        _TRAINER,
        "BasePPOTrainer.broadcast_to_vllm",
        "(self) -> None",
        "openrlhf/trainer/ppo_trainer.py:300",
        "wrap",
    ),
    Hook(
        _GENERATOR,
        "SamplesGenerator._generate_vllm",
        "(self, dataloader_iter, num_prompts: int, dynamic_filtering, **generate_kwargs) -> "
        f"Tuple[{_EXPERIENCES}, int, bool]",
        "openrlhf/trainer/ppo_utils/samples_generator.py:140",
        "wrap",
    ),
    Hook(_LOSS, "aggregate_loss", _NORMALISED, "openrlhf/models/loss.py:11", "wrap"),
    # The re-export ppo_actor imports it from: patched and restored with the others, so a
    # module imported while installed never keeps ours after uninstall.
    Hook(_MODELS, "aggregate_loss", _NORMALISED, "openrlhf/models/__init__.py:10", "wrap"),
    Hook(_LOSS, "masked_mean", _MASKED_MEAN, "openrlhf/models/loss.py:8", "wrap"),
    Hook(_ACTOR, "aggregate_loss", _NORMALISED, "openrlhf/trainer/ray/ppo_actor.py:15", "wrap"),
    Hook(_ACTOR, "masked_mean", _MASKED_MEAN, "openrlhf/trainer/ray/ppo_actor.py:16", "wrap"),
    # The actor's metrics of one micro-step, summed over the ranks, are divided by their
    # action-token count (ppo_actor.py:200-219, then :254 over the micro-steps).
    Hook(
        _STRATEGY,
        "DeepspeedStrategy.all_reduce",
        "(self, data, op='mean')",
        "openrlhf/utils/deepspeed/deepspeed.py:599",
        "wrap",
    ),
)

HOOKS: tuple[Hook, ...] = (
    *PATCHED,
    # The parts of the trainer the wrappers reach through it.
    Hook(
        _TRAINER,
        "BasePPOTrainer.__init__",
        None,
        "openrlhf/trainer/ppo_trainer.py:178",
        "read",
        attribute="experience_maker",
    ),
    Hook(
        _TRAINER,
        "BasePPOTrainer.__init__",
        None,
        "openrlhf/trainer/ppo_trainer.py:164",
        "read",
        attribute="actor_model_group",
    ),
    Hook(
        _MAKER,
        "RemoteExperienceMaker.__init__",
        None,
        "openrlhf/trainer/ppo_utils/experience_maker.py:33",
        "read",
        attribute="strategy",
    ),
    Hook(
        _MAKER,
        "RemoteExperienceMaker.__init__",
        None,
        "openrlhf/trainer/ppo_utils/experience_maker.py:42",
        "read",
        attribute="kl_ctl",
    ),
    # The advantage step calls OpenRLHF's own pieces, as its method does.
    Hook(
        "openrlhf.models.utils",
        "compute_reward",
        "(r: Union[torch.Tensor, float], kl_coef: float, kl: Union[torch.Tensor, "
        "list[torch.Tensor]], action_mask: Optional[torch.Tensor] = None, reward_clip_range: "
        "Tuple[float, float] = None) -> Union[torch.Tensor, list[torch.Tensor]]",
        "openrlhf/models/utils.py:131",
        "call",
    ),
    Hook(
        "openrlhf.trainer.ppo_utils.length_penalty",
        "apply_length_penalties",
        "(experiences: List, args) -> None",
        "openrlhf/trainer/ppo_utils/length_penalty.py:109",
        "call",
    ),
    # κ_eff: the actor group's forward, dispatched and gathered as the experience maker does
    # for action_log_probs, the actor reloaded and offloaded around it (--ds.enable_sleep).
    Hook(
        _MAKER,
        "RemoteExperienceMaker._dispatch_forward",
        "(self, group, sync_condition, **kwargs)",
        "openrlhf/trainer/ppo_utils/experience_maker.py:100",
        "call",
    ),
    Hook(
        _MAKER,
        "RemoteExperienceMaker._flatten_results",
        "(self, refs, duplicate_factor)",
        "openrlhf/trainer/ppo_utils/experience_maker.py:108",
        "call",
    ),
    # spo's rho="kl": the same forward from the advantage step, over as many chunks as the
    # group has data-parallel ranks (async_run_method_batch refuses fewer).
    Hook(
        _MAKER,
        "RemoteExperienceMaker.__init__",
        None,
        "openrlhf/trainer/ppo_utils/experience_maker.py:37",
        "read",
        attribute="actor_model_group",
    ),
    Hook(
        "openrlhf.trainer.ray.launcher",
        "RayActorGroup.__init__",
        None,
        "openrlhf/trainer/ray/launcher.py:232",
        "read",
        attribute="duplicate_actors",
    ),
    Hook(
        "openrlhf.trainer.ray.launcher",
        "RayActorGroup._initiate_actors",
        None,
        "openrlhf/trainer/ray/launcher.py:268",
        "read",
        attribute="_actor_handlers",
    ),
    Hook(
        "openrlhf.trainer.ray.launcher",
        "RayActorGroup.async_run_method",
        "(self, method_name, *args, **kwargs)",
        "openrlhf/trainer/ray/launcher.py:312",
        "call",
    ),
    # resample: the generation's own steps, around our decision.
    Hook(
        _GENERATOR,
        "_collect_prompt_batch",
        "(dataloader_iter, num_prompts: int)",
        "openrlhf/trainer/ppo_utils/samples_generator.py:16",
        "call",
    ),
    Hook(
        _GENERATOR,
        "SamplesGenerator._dispatch_prompts_to_vllm",
        "(self, prompts: List[str], labels: List[str], *, images: List = None, "
        "**generate_kwargs) -> List",
        "openrlhf/trainer/ppo_utils/samples_generator.py:195",
        "call",
    ),
    Hook(
        _GENERATOR,
        "SamplesGenerator._process_response_into_experience",
        "(self, response, **generate_kwargs) -> openrlhf.trainer.ppo_utils.experience.Experience",
        "openrlhf/trainer/ppo_utils/samples_generator.py:243",
        "call",
    ),
    # Whether Ray ships a tensor view as its own elements (OpenRLHF's runtime env turns it
    # on). Recorded from `ray`, so that the private package is a checked name too.
    Hook(
        "ray",
        "_private.ray_constants.RAY_ENABLE_ZERO_COPY_TORCH_TENSORS",
        None,
        "ray/_private/ray_constants.py:591",
        "read",
    ),
    # The entry point. Parse-only runs train_ppo_ray's `if __name__ == "__main__":` block
    # (:197, with its module's argparse, os and datetime) with `train` replaced; a run
    # executes the module. Both add our names to the choices of --algo.advantage.estimator
    # (:515) and our flags to its parser by wrapping argparse's (CPython 3.11 lines).
    Hook(
        "openrlhf.cli.train_ppo_ray",
        "train",
        "(args)",
        "openrlhf/cli/train_ppo_ray.py:19",
        "override",
    ),
    Hook(
        "argparse",
        "ArgumentParser.add_argument",
        "(self, *args, **kwargs)",
        "argparse.py:1419",
        "wrap",
    ),
    Hook(
        "argparse",
        "ArgumentParser.parse_args",
        "(self, args=None, namespace=None)",
        "argparse.py:1868",
        "wrap",
    ),
    Hook(
        "argparse",
        "_ActionsContainer.__init__",
        "(self, description, prefix_chars, argument_default, conflict_handler)",
        "argparse.py:1370",
        "read",
        attribute="_actions",
    ),
)


# -- the private calls, for the other modules -------------------------------------------


def collect_prompts(
    dataloader_iter: Any, count: int
) -> tuple[list[Any], list[Any], list[Any], bool]:
    """Up to ``count`` prompts from OpenRLHF's prompt dataloader, as the generation draws
    them: (prompts, labels, images, whether the dataloader ran out)."""
    from openrlhf.trainer.ppo_utils.samples_generator import _collect_prompt_batch

    prompts, labels, images, exhausted = _collect_prompt_batch(dataloader_iter, count)
    return prompts, labels, images, exhausted


def dispatch_prompts(
    generator: Any, prompts: list[Any], labels: list[Any], images: list[Any], **generate_kwargs: Any
) -> list[Any]:
    """Send ``prompts`` to the generator's vLLM engines: one Ray ref per prompt (a list of
    its samples' responses)."""
    return list(
        generator._dispatch_prompts_to_vllm(prompts, labels, images=images, **generate_kwargs)
    )


def response_experience(generator: Any, response: Any, **generate_kwargs: Any) -> Any:
    """One vLLM response as OpenRLHF's one-row ``Experience``, its reward included."""
    return generator._process_response_into_experience(response, **generate_kwargs)


def actor_log_probs(maker: Any, group: Any, **batch: Any) -> list[Any]:
    """The actor ``group``'s ``forward`` on ``batch`` (sequences, action_mask,
    attention_mask), dispatched and gathered as the experience maker does for
    ``action_log_probs`` (its sync condition and its copies per data-parallel rank, from
    ``maker.strategy.args``)."""
    args = maker.strategy.args
    sync = args.train.colocate_all or args.train.colocate_actor_ref
    refs = maker._dispatch_forward(group, sync, **batch)
    duplicate_factor = args.ds.ring_attn_size * args.ds.tensor_parallel_size
    return list(maker._flatten_results(refs, duplicate_factor))


def data_parallel_ranks(group: Any) -> int:
    """How many chunks the actor group's ``async_run_method_batch`` splits a batch into
    (one per data-parallel rank: its actors over ring-attention and tensor-parallel
    copies, ``launcher.py:347-348``)."""
    return max(1, len(group._actor_handlers) // int(group.duplicate_actors))


def ray_ships_views_compactly() -> bool:
    """Whether Ray serialises a tensor view as its own elements: with its zero-copy tensor
    serialisation (``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1``, set by OpenRLHF's ``train`` and
    by our entry point). Ray's default pickling sends a view's whole storage."""
    try:
        from ray._private import ray_constants
    except ImportError:
        return False
    return bool(getattr(ray_constants, "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", False))


@contextlib.contextmanager
def openrlhf_parser(
    flag: str,
    choices: Callable[[], list[str]],
    extend: Callable[[argparse.ArgumentParser], None],
    check: Callable[[argparse.Namespace], None],
) -> Iterator[None]:
    """While OpenRLHF builds and parses its arguments: ``choices()`` added to those of
    ``flag``; the parser that has ``flag`` gets ``extend(parser)`` (our flags) before it
    parses, and its result goes through ``check`` (which may store values back)."""
    parser = argparse.ArgumentParser
    own = {name: vars(parser).get(name) for name in ("add_argument", "parse_args")}
    original_add = parser.add_argument
    original_parse = parser.parse_args

    def add_argument(self: argparse.ArgumentParser, *names: Any, **kwargs: Any) -> Any:
        if flag in names and kwargs.get("choices") is not None:
            kwargs["choices"] = [*kwargs["choices"], *choices()]
        return original_add(self, *names, **kwargs)

    def parse_args(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        if not any(flag in action.option_strings for action in self._actions):
            return original_parse(self, *args, **kwargs)
        extend(self)
        parsed = original_parse(self, *args, **kwargs)
        check(parsed)
        return parsed

    parser.add_argument = add_argument  # type: ignore[method-assign,assignment]
    parser.parse_args = parse_args  # type: ignore[method-assign]
    try:
        yield
    finally:
        for name, method in own.items():
            if method is None:  # inherited (add_argument): drop ours, not shadow the base
                delattr(parser, name)
            else:
                setattr(parser, name, method)


# -- the wrappers of PATCHED ------------------------------------------------------------
# Each factory imports the adapter's modules when it runs (when OpenRLHF imports the
# patched module): they import this one.

_MARK = "_advbudget_original"

#: The key of the run's memory (the prompt ledger, an estimator's state) in OpenRLHF's
#: checkpoint ``client_states``; :data:`LEDGER_STATE`: the ledger alone, in older ones.
MEMORY_STATE = "advbudget_memory"
LEDGER_STATE = "advbudget_prompt_ledger"


def _wrap_compute_advantages_and_returns(original: Any) -> Any:
    from ._estimators import compute_advantages_and_returns, is_ours

    @functools.wraps(original)
    def compute_advantages_and_returns_patched(self: Any, experiences: list[Any]) -> Any:
        if is_ours(self.strategy.args.algo.advantage.estimator):
            import torch

            with torch.no_grad():
                return compute_advantages_and_returns(self, experiences)
        return original(self, experiences)

    return compute_advantages_and_returns_patched


def _wrap_ppo_train(original: Any) -> Any:
    from ._estimators import is_ours
    from ._kappa import after_update
    from ._policy_versions import set_weights_version
    from ._resample import rounds_status

    @functools.wraps(original)
    def ppo_train_patched(self: Any, global_steps: int) -> Any:
        status = original(self, global_steps)
        if is_ours(self.args.algo.advantage.estimator):
            set_weights_version(self, global_steps + 1)  # train_step(g) makes update g + 1
            status.update(after_update(self, global_steps))
            status.update(rounds_status(self))
        return status

    return ppo_train_patched


def _wrap_save_logs_and_checkpoints(original: Any) -> Any:
    from ._estimators import MEMORY_ATTR

    @functools.wraps(original)
    def save_logs_and_checkpoints_patched(
        self: Any, global_step: int, logs_dict: Any = None, client_states: Any = None
    ) -> Any:
        # Only at the steps OpenRLHF saves (ppo_trainer.py:394): the state is O(prompts).
        memory = getattr(getattr(self, "experience_maker", None), MEMORY_ATTR, None)
        if memory and global_step % self.args.ckpt.save_steps == 0:
            client_states = {**(client_states or {}), MEMORY_STATE: memory.state_dict()}
        return original(self, global_step, logs_dict, client_states)

    return save_logs_and_checkpoints_patched


def _wrap_init_checkpoint_states(original: Any) -> Any:
    from .._features import RunMemory
    from ._estimators import MEMORY_ATTR, is_ours
    from ._policy_versions import set_weights_version

    @functools.wraps(original)
    def init_checkpoint_states_patched(self: Any) -> Any:
        states = original(self)
        if not is_ours(self.args.algo.advantage.estimator):
            return states
        # A resumed run's weights have had global_step updates (sent to the engines next).
        set_weights_version(self, int((states or {}).get("global_step", 0)))
        state = (states or {}).get(MEMORY_STATE, (states or {}).get(LEDGER_STATE))
        if state is not None:
            setattr(self.experience_maker, MEMORY_ATTR, RunMemory.from_state_dict(state))
        return states

    return init_checkpoint_states_patched


def _wrap_broadcast_to_vllm(original: Any) -> Any:
    from ._estimators import is_ours
    from ._policy_versions import publish_weights

    @functools.wraps(original)
    def broadcast_to_vllm_patched(self: Any) -> None:
        original(self)
        if is_ours(self.args.algo.advantage.estimator):
            publish_weights(self)  # still inside the async trainer's vLLM lock

    return broadcast_to_vllm_patched


def _wrap_init(original: Any) -> Any:
    @functools.wraps(original)
    def init_patched(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        bind_ppo_train(self)

    return init_patched


def _wrap_generate_vllm(original: Any) -> Any:
    from ._estimators import is_ours
    from ._options import options_of
    from ._policy_versions import published, stamp
    from ._resample import generate

    @functools.wraps(original)
    def generate_vllm_patched(
        self: Any, dataloader_iter: Any, num_prompts: int, dynamic_filtering: Any, **kwargs: Any
    ) -> Any:
        args = self.args
        if not is_ours(args.algo.advantage.estimator):
            return original(self, dataloader_iter, num_prompts, dynamic_filtering, **kwargs)
        version = published()  # the weights the engines generate this round with
        if dynamic_filtering and options_of(self, args).skipped_groups == "resample":
            experiences, consumed, exhausted = generate(
                self, dataloader_iter, num_prompts, **kwargs
            )
        else:
            experiences, consumed, exhausted = original(
                self, dataloader_iter, num_prompts, dynamic_filtering, **kwargs
            )
        stamp(experiences, version)
        return experiences, consumed, exhausted

    return generate_vllm_patched


def _nonzero(total: Any) -> Any:
    """A loss normaliser with 0 replaced by 1: 0 only when every row it counts has an
    all-zero mask (``drop``), and then the masked numerator is 0 too: the loss is 0, not
    0/0 (NaN gradients). Any other value passes unchanged."""
    import torch

    if total is None:
        return None
    if isinstance(total, torch.Tensor):
        return torch.where(total == 0, torch.ones_like(total), total)
    return total if total else 1.0


def _wrap_aggregate_loss(original: Any) -> Any:
    @functools.wraps(original)
    def aggregate_loss_guarded(
        loss: Any,
        loss_mask: Any,
        token_level_loss: bool = True,
        dp_size: int = 1,
        batch_num_tokens: Any = None,
        global_batch_size: Any = None,
    ) -> Any:
        return original(
            loss,
            loss_mask,
            token_level_loss=token_level_loss,
            dp_size=dp_size,
            batch_num_tokens=_nonzero(batch_num_tokens),
            global_batch_size=_nonzero(global_batch_size),
        )

    return aggregate_loss_guarded


def _wrap_masked_mean(original: Any) -> Any:
    @functools.wraps(original)
    def masked_mean_guarded(tensor: Any, mask: Any, dim: Any = None) -> Any:
        # OpenRLHF's mean (masked sum / mask sum), 0 where the mask is empty (a micro-batch
        # of dropped rows: its logged clip ratio, ppo_kl, logprobs_diff), not NaN.
        if mask is None:
            return original(tensor, mask, dim=dim)
        return (tensor * mask).sum(dim=dim) / _nonzero(mask.sum(dim=dim))

    return masked_mean_guarded


#: The action-token count of a micro-step with none (the key OpenRLHF's actor reduces it
#: under, ``ppo_actor.py:200``): positive, so its metric means are 0/_NO_TOKENS = 0, and
#: too small to move a sum of real counts (T + 1e-30 == T in float64 for T >= 1e-14).
_TOKENS_KEY = "_num_action_tokens"
_NO_TOKENS = 1e-30


def _wrap_all_reduce(original: Any) -> Any:
    @functools.wraps(original)
    def all_reduce_guarded(self: Any, data: Any, op: str = "mean") -> Any:
        reduced = original(self, data, op)
        if isinstance(reduced, dict) and reduced.get(_TOKENS_KEY) == 0:
            reduced[_TOKENS_KEY] = _NO_TOKENS
        return reduced

    return all_reduce_guarded


#: The wrapper factory of each method of :data:`PATCHED`, by the method's name.
_WRAPPERS: dict[str, Callable[[Any], Any]] = {
    "compute_advantages_and_returns": _wrap_compute_advantages_and_returns,
    "ppo_train": _wrap_ppo_train,
    "save_logs_and_checkpoints": _wrap_save_logs_and_checkpoints,
    "init_checkpoint_states": _wrap_init_checkpoint_states,
    "broadcast_to_vllm": _wrap_broadcast_to_vllm,
    "__init__": _wrap_init,
    "_generate_vllm": _wrap_generate_vllm,
    "aggregate_loss": _wrap_aggregate_loss,
    "masked_mean": _wrap_masked_mean,
    "all_reduce": _wrap_all_reduce,
}

# Methods of BasePPOTrainer bound on each instance too (Ray's copies; see the docstring),
# unless the trainer's class overrides one (the async TrainingActor's broadcast_to_vllm
# takes a lock around the base method, which runs our wrapper).
_BOUND = ("ppo_train", "save_logs_and_checkpoints", "init_checkpoint_states", "broadcast_to_vllm")


def bind_ppo_train(trainer: Any) -> None:
    """Make ``trainer.ppo_train`` run the κ_eff pass (and the checkpoint methods carry the
    prompt ledger), whatever its class holds.

    In a Ray actor ``type(trainer).ppo_train`` is Ray's copy of OpenRLHF's original (see the
    module docstring); an instance attribute shadows it. A no-op when the class already
    resolves to our wrapper (a plain subclass, or one decorated after the patch: its copy
    wraps ours, and ``functools.wraps`` carries our mark onto the copy).
    """
    for name in _BOUND:
        method = getattr(type(trainer), name)
        overridden = not getattr(method, "__qualname__", "").startswith("BasePPOTrainer.")
        if not hasattr(method, _MARK) and not overridden:
            patched = _WRAPPERS[name](method)
            setattr(patched, _MARK, method)
            setattr(trainer, name, types.MethodType(patched, trainer))


# -- install, on import -----------------------------------------------------------------


def _targets() -> dict[str, list[tuple[str, str, Callable[[Any], Any]]]]:
    """module -> [(class, method, wrapper factory)] of :data:`PATCHED`; class "": a function
    of the module."""
    targets: dict[str, list[tuple[str, str, Callable[[Any], Any]]]] = {}
    for hook in PATCHED:
        owner, _, method = hook.qualname.rpartition(".")
        targets.setdefault(hook.module, []).append((owner, method, _WRAPPERS[method]))
    return targets


_TARGETS = _targets()


def _owner(module: types.ModuleType, cls_name: str) -> Any:
    return getattr(module, cls_name) if cls_name else module


def _own(owner: Any, name: str) -> Any:
    return vars(owner)[name]


def _patch_module(module: types.ModuleType) -> None:
    for cls_name, method, wrap in _TARGETS[module.__name__]:
        owner = _owner(module, cls_name)
        original = _own(owner, method)  # the class's own: never a base's, never a copy
        if not hasattr(original, _MARK):
            patched = wrap(original)
            setattr(patched, _MARK, original)
            setattr(owner, method, patched)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a target module right after it is first imported.

    The hook runs at the start of every Ray worker (vLLM engines and model ranks too):
    importing OpenRLHF's trainer there would pull in vLLM, DeepSpeed and transformers
    (seconds per worker, before Ray has set the worker's GPUs). So nothing is imported until
    OpenRLHF itself imports the module.
    """

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        _patch_module(module)


def install() -> None:
    """Patch OpenRLHF's trainer in this process (idempotent): the modules already imported
    now, the others when they are imported. Raises ImportError on an OpenRLHF version the
    patch was not checked against."""
    check_openrlhf_version()
    if not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
    for name in _TARGETS:
        if name in sys.modules:
            _patch_module(sys.modules[name])


def uninstall() -> None:
    """Restore OpenRLHF's own methods and stop patching on import."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _PatchOnImport)]
    for name, targets in _TARGETS.items():
        if name not in sys.modules:
            continue
        for cls_name, method, _ in targets:
            owner = _owner(sys.modules[name], cls_name)
            original = getattr(_own(owner, method), _MARK, None)
            if original is not None:
                setattr(owner, method, original)


def is_installed() -> bool:
    """Whether OpenRLHF's trainer, once imported, runs patched in this process (imports it)."""
    for name, targets in _TARGETS.items():
        module = importlib.import_module(name)
        for cls_name, method, _ in targets:
            if not hasattr(_own(_owner(module, cls_name), method), _MARK):
                return False
    return True
