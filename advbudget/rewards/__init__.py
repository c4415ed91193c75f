r"""Math answer rewards, written once and called from verl, TRL and OpenRLHF.

Two graders: DAPO's rule (:func:`dapo_reward`: the last ``Answer:`` line of the last 300
characters, normalised, exact string match; what DAPO trained with) and math-verify
(:func:`math_verify_reward`: SymPy equality, lenient on format). Plus DAPO's overlong
penalty (:func:`overlong_penalty`). The framework wrappers are thin modules of their own:

- ``advbudget.adapters.verl.rewards``: ``compute_score`` for ``custom_reward_function``;
- ``advbudget.adapters.trl.rewards``: reward functions for ``GRPOTrainer(reward_funcs=...)``;
- ``advbudget/adapters/openrlhf/rewards.py``: a file for ``--reward.remote_url``.

(``advbudget.rewards.<framework>``, their earlier paths, still work.)

``import advbudget.rewards`` imports no ML framework, and math-verify only when first used.

Example:
    >>> from advbudget.rewards import dapo_reward, math_verify_reward
    >>> response = "... which gives 68/2 = 34.\nAnswer: 34."
    >>> dapo_reward(response, "34"), math_verify_reward(response, "34")
    (-1.0, 1.0)
"""

from ._dapo import dapo_reward, extract_answer, normalize_answer
from ._grade import is_correct
from ._math_verify import math_verify_reward
from ._overlong import overlong_penalty

__all__ = [
    "dapo_reward",
    "extract_answer",
    "is_correct",
    "math_verify_reward",
    "normalize_answer",
    "overlong_penalty",
]
