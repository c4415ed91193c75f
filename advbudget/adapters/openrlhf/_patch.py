"""The patch of OpenRLHF's trainer: our estimators, the κ_eff pass, skipped groups and the
prompt ledger.

:func:`install` wraps these (openrlhf 0.11.2):

- ``RemoteExperienceMaker.compute_advantages_and_returns`` (``experience_maker.py``): for our
  estimator names (:func:`~advbudget.adapters.openrlhf.estimator_names`) it runs
  :func:`~advbudget.adapters.openrlhf.compute_advantages_and_returns`, for every other name
  OpenRLHF's own method, unchanged;
- ``BasePPOTrainer.ppo_train`` (``ppo_trainer.py``; the sync ``PPOTrainer`` and the async
  ``TrainingActor`` both inherit it): after the update, every ``--advbudget.kappa_every``
  steps, adds ``advbudget/kappa_eff/*`` to the status OpenRLHF logs;
- ``BasePPOTrainer.save_logs_and_checkpoints`` / ``init_checkpoint_states``: the prompt
  ledger (:func:`._advantages.prompt_ledger`) into the checkpoint's ``client_states`` at
  the steps OpenRLHF saves, and back on resume;
- ``BasePPOTrainer.__init__``: binds these wrappers on the trainer instance too. ``@ray.remote``
  copies every method, inherited ones included, onto the actor class when the class is
  decorated (ray 2.55: ``actor.py:2684`` ``_inject_tracing_into_class`` sets a tracing
  wrapper of each member from ``inspect.getmembers`` on the subclass,
  ``util/tracing/tracing_helper.py:512-572``). ``PPOTrainer`` is decorated while
  ``ppo_trainer.py`` executes, before the patch on import can run, so ``PPOTrainer.ppo_train``
  is a copy of OpenRLHF's original that shadows the patched base method, and the actor
  (unpickled from the driver's class) never runs the κ_eff pass. The instance attribute
  wins over both copies, whatever the import order and the driver did;
- ``SamplesGenerator._generate_vllm`` (``samples_generator.py``): with dynamic filtering,
  our estimators and ``--advbudget.skipped_groups resample``, :func:`._resample.generate`
  (the estimator's skip rule, ``--advbudget.max_generation_batches``); else OpenRLHF's;
- ``aggregate_loss`` and ``masked_mean`` where OpenRLHF's loss code looks them up
  (``openrlhf.models.loss``, ``openrlhf.trainer.ray.ppo_actor``): a normaliser or mask sum
  of 0 becomes 1, so a step or micro-batch whose rows ``drop`` all masked gives a 0 loss
  and 0 metrics instead of 0/0 (NaN gradients). Any other value passes unchanged, and
  OpenRLHF never builds an empty mask itself, so ``keep`` runs bit for bit as before.

They run inside Ray actors (``PPOTrainer``, the model ranks), not the driver, so the patch
must be installed there: pass :data:`HOOK` as Ray's ``worker_process_setup_hook``::

    ray.init(runtime_env={"worker_process_setup_hook": HOOK})
    # or: ray job submit --runtime-env-json '{"worker_process_setup_hook":
    #      "advbudget.adapters.openrlhf.install"}' -- python3 -m advbudget.adapters.openrlhf ...
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import sys
import types
from collections.abc import Callable
from typing import Any

from ._advantages import (
    LEDGER_ATTR,
    compute_advantages_and_returns,
    is_ours,
    prompt_ledger,
    skipped_groups,
)
from ._kappa import after_update
from ._resample import generate, rounds_status
from ._version import check_openrlhf_version

HOOK = "advbudget.adapters.openrlhf.install"
_MARK = "_advbudget_original"


def _wrap_compute_advantages_and_returns(original: Any) -> Any:
    @functools.wraps(original)
    def compute_advantages_and_returns_patched(self: Any, experiences: list[Any]) -> Any:
        if is_ours(self.strategy.args.algo.advantage.estimator):
            import torch

            with torch.no_grad():
                return compute_advantages_and_returns(self, experiences)
        return original(self, experiences)

    return compute_advantages_and_returns_patched


def _wrap_ppo_train(original: Any) -> Any:
    @functools.wraps(original)
    def ppo_train_patched(self: Any, global_steps: int) -> Any:
        status = original(self, global_steps)
        if is_ours(self.args.algo.advantage.estimator):
            status.update(after_update(self, global_steps))
            status.update(rounds_status(self))
        return status

    return ppo_train_patched


def _wrap_generate_vllm(original: Any) -> Any:
    @functools.wraps(original)
    def generate_vllm_patched(
        self: Any, dataloader_iter: Any, num_prompts: int, dynamic_filtering: Any, **kwargs: Any
    ) -> Any:
        args = self.args
        if (
            dynamic_filtering
            and is_ours(args.algo.advantage.estimator)
            and skipped_groups(args) == "resample"
        ):
            return generate(self, dataloader_iter, num_prompts, **kwargs)
        return original(self, dataloader_iter, num_prompts, dynamic_filtering, **kwargs)

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


def bind_ppo_train(trainer: Any) -> None:
    """Make ``trainer.ppo_train`` run the κ_eff pass (and the checkpoint methods carry the
    prompt ledger), whatever its class holds.

    In a Ray actor ``type(trainer).ppo_train`` is Ray's copy of OpenRLHF's original (see the
    module docstring); an instance attribute shadows it. A no-op when the class already
    resolves to our wrapper (a plain subclass, or one decorated after the patch: its copy
    wraps ours, and ``functools.wraps`` carries our mark onto the copy).
    """
    for name, wrap in _BOUND:
        method = getattr(type(trainer), name)
        if not hasattr(method, _MARK):
            patched = wrap(method)
            setattr(patched, _MARK, method)
            setattr(trainer, name, types.MethodType(patched, trainer))


#: The key of the prompt ledger in OpenRLHF's checkpoint ``client_states``.
LEDGER_STATE = "advbudget_prompt_ledger"


def _wrap_save_logs_and_checkpoints(original: Any) -> Any:
    @functools.wraps(original)
    def save_logs_and_checkpoints_patched(
        self: Any, global_step: int, logs_dict: Any = None, client_states: Any = None
    ) -> Any:
        # Only at the steps OpenRLHF saves (ppo_trainer.py:394): the state is O(prompts).
        ledger = getattr(getattr(self, "experience_maker", None), LEDGER_ATTR, None)
        if ledger is not None and global_step % self.args.ckpt.save_steps == 0:
            client_states = {**(client_states or {}), LEDGER_STATE: ledger.state_dict()}
        return original(self, global_step, logs_dict, client_states)

    return save_logs_and_checkpoints_patched


def _wrap_init_checkpoint_states(original: Any) -> Any:
    @functools.wraps(original)
    def init_checkpoint_states_patched(self: Any) -> Any:
        states = original(self)
        state = (states or {}).get(LEDGER_STATE)
        if state is not None and is_ours(self.args.algo.advantage.estimator):
            prompt_ledger(self.experience_maker).load_state_dict(state)
        return states

    return init_checkpoint_states_patched


# Methods of BasePPOTrainer bound on each instance too (Ray's copies; see the docstring).
_BOUND = (
    ("ppo_train", _wrap_ppo_train),
    ("save_logs_and_checkpoints", _wrap_save_logs_and_checkpoints),
    ("init_checkpoint_states", _wrap_init_checkpoint_states),
)


def _wrap_init(original: Any) -> Any:
    @functools.wraps(original)
    def init_patched(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        bind_ppo_train(self)

    return init_patched


# module -> [(class, method, wrapper factory)]: every method we patch; class "": a function
# of the module (patched in each module that looks it up by its global name).
_TARGETS: dict[str, list[tuple[str, str, Callable[[Any], Any]]]] = {
    "openrlhf.trainer.ppo_utils.experience_maker": [
        (
            "RemoteExperienceMaker",
            "compute_advantages_and_returns",
            _wrap_compute_advantages_and_returns,
        ),
    ],
    "openrlhf.trainer.ppo_trainer": [
        ("BasePPOTrainer", "ppo_train", _wrap_ppo_train),
        ("BasePPOTrainer", "save_logs_and_checkpoints", _wrap_save_logs_and_checkpoints),
        ("BasePPOTrainer", "init_checkpoint_states", _wrap_init_checkpoint_states),
        ("BasePPOTrainer", "__init__", _wrap_init),
    ],
    "openrlhf.trainer.ppo_utils.samples_generator": [
        ("SamplesGenerator", "_generate_vllm", _wrap_generate_vllm),
    ],
    "openrlhf.models.loss": [
        ("", "aggregate_loss", _wrap_aggregate_loss),
        ("", "masked_mean", _wrap_masked_mean),
    ],
    "openrlhf.trainer.ray.ppo_actor": [
        ("", "aggregate_loss", _wrap_aggregate_loss),
        ("", "masked_mean", _wrap_masked_mean),
    ],
}


def _owner(module: types.ModuleType, cls_name: str) -> Any:
    return getattr(module, cls_name) if cls_name else module


def _own(owner: Any, name: str) -> Any:
    return vars(owner)[name]


def _patch(module: types.ModuleType) -> None:
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
        _patch(module)


def install() -> None:
    """Patch OpenRLHF's trainer in this process (idempotent): the modules already imported
    now, the others when they are imported. Raises ImportError on an OpenRLHF version the
    patch was not checked against."""
    check_openrlhf_version()
    if not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
    for name in _TARGETS:
        if name in sys.modules:
            _patch(sys.modules[name])


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
