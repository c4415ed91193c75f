"""OpenRLHF's driver of the shared adapter suite (``tests/adapters/contract``): our
estimators through the patched ``RemoteExperienceMaker.compute_advantages_and_returns`` on
real experiences, options as ``--advbudget.<name>`` flags (``args.advbudget.<name>``)."""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from advbudget.adapters._options import AdapterOptions
from advbudget.adapters.openrlhf._options import key_of
from advbudget.adapters.openrlhf._options import read_options as read_args

__all__ = ["advantages", "key_of", "read_options", "use_import_stubs"]


def use_import_stubs() -> None:
    """OpenRLHF's trainer modules import flash_attn and vllm, which a CPU machine lacks:
    the import stubs, for conftest.py and for the shared suite run alone."""
    path = Path(__file__).parent / "stubs" / "use.py"
    spec = importlib.util.spec_from_file_location("openrlhf_import_stubs", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.use_import_stubs()


use_import_stubs()


def _flags(options: Mapping[str, Any]) -> SimpleNamespace:
    """``args.advbudget`` as the launcher leaves it: its parser's defaults for our flags,
    then the options given (``solved_reward=None`` is the flag's ``none``)."""
    from advbudget.adapters.openrlhf.__main__ import _add_own_flags

    parser = argparse.ArgumentParser()
    _add_own_flags(parser)
    flags = {key.partition(".")[2]: value for key, value in vars(parser.parse_args([])).items()}
    for name, value in options.items():
        flags[name] = "none" if name == "solved_reward" and value is None else value
    return SimpleNamespace(**flags)


def _args(name: str, group_size: int, options: Mapping[str, Any]) -> Any:
    from advbudget.adapters.openrlhf.testing import make_args

    args = make_args(name, group_size)
    args.advbudget = _flags(options)
    return args


def read_options(options: Mapping[str, Any]) -> AdapterOptions:
    return read_args(_args("reward_budget", 2, options))


def advantages(
    name: str, rewards: Sequence[float], group_size: int, options: Mapping[str, Any]
) -> list[float]:
    """The advantage of each rollout's first action token (its sequence advantage: KL off,
    gamma 1) from OpenRLHF's own method, patched by ``install``, on real experiences."""
    import torch

    import advbudget.adapters.openrlhf as adapter
    from advbudget.adapters.openrlhf.testing import make_experiences, make_maker

    experiences = make_experiences(len(rewards) // group_size, group_size, constant_groups=0)
    given = torch.tensor(rewards, dtype=torch.float32)
    for experience in experiences:  # the given rewards, in OpenRLHF's shuffled order
        experience.rewards = given[experience.index].clone()
        experience.info["reward"] = experience.rewards.clone()
    maker = make_maker(_args(name, group_size, options))
    installed = adapter.is_installed()
    adapter.install()
    try:
        with torch.no_grad():
            out = type(maker).compute_advantages_and_returns(maker, experiences)
    finally:
        if not installed:
            adapter.uninstall()
    values = [0.0] * len(rewards)
    for experience in out:
        for row, slot in enumerate(experience.index):
            values[slot] = float(experience.advantages[row, 0])
    return values
