"""Option rules and inputs that several estimators share (one wording everywhere)."""

from __future__ import annotations

from typing import Any

from ... import checks
from ._spec import Input, Rule


def _std_correction(name: str, value: Any) -> int:
    if isinstance(value, bool) or value not in (0, 1):
        raise ValueError(f"{name}: expected 0 (biased std) or 1 (unbiased), got {value!r}")
    return int(value)


EPS = Rule(checks.nonnegative_finite, "added to the std")
STD_CORRECTION = Rule(_std_correction, "1: unbiased std (torch's default); 0: biased")

WHITENING = {
    "std_correction": Rule(
        _std_correction,
        "1: unbiased variance over tokens (verl's masked_whiten); 0: biased (OpenRLHF)",
    ),
    "var_eps": Rule(checks.nonnegative_finite, "added to the variance"),
    "var_floor": Rule(checks.nonnegative_finite, "the variance's lower clamp"),
    "std_norm": Rule(
        checks.boolean, "False: only the batch mean is subtracted (OpenRLHF's no_std_norm)"
    ),
}
WHITEN_NOTE = (
    "the mean and variance of the advantages over every response token of the whole batch "
    "(each rollout weighted by response_lengths, or 1 without them)"
)

RESPONSE_LENGTHS = Input(
    "response_lengths", "the token count of each rollout's response (verl's response_mask sum)"
)
TOKEN_WEIGHTS = Input(
    "response_lengths",
    "the token count of each rollout's response, its weight in the batch statistics "
    "(without it every rollout weighs 1)",
    required=False,
)
