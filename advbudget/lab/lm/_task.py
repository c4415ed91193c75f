"""The task: column addition, where the routine tier has no carry and the hard tier needs one.

A problem is ``a+b=?`` with two ``digits``-digit numbers whose sum has ``digits`` digits
too (no overflow), answered as DAPO does: ``Answer: <sum>`` on the last line. Routine
problems need no carry: each column's digit is the sum of the column's digits. Hard
problems need at least one: a column's digit is one more than its column sum, a behaviour
the warm start rarely samples because its supervised data holds few carries. The digit
rule that routine problems reward is wrong on hard ones, and both share every parameter:
the structure of the lab's routine and hard types (docs: The LM experiment).

Pure Python, no ML framework.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from advbudget.checks import int_at_least

Tier = Literal["routine", "hard"]
TIERS: tuple[Tier, ...] = ("routine", "hard")
SPLITS = ("train", "validation", "test")
# The characters of every prompt and completion; "Answer:" is one token.
ALPHABET = tuple("0123456789+=?\n ")
ANSWER_WORD = "Answer:"
MAX_DIGITS = 3  # 4 digits would enumerate ~20M pairs: not a miniature


@dataclass(frozen=True)
class Problem:
    """One addition problem: ``prompt`` (``"12+34=?\\n"``), its ``answer`` (``"46"``),
    its ``tier`` and the two operands."""

    a: int
    b: int
    tier: Tier

    @property
    def prompt(self) -> str:
        return f"{self.a}+{self.b}=?\n"

    @property
    def answer(self) -> str:
        return str(self.a + self.b)

    @property
    def completion(self) -> str:
        """The reference completion the warm start is trained on."""
        return f"{ANSWER_WORD} {self.answer}"


def carries(a: int, b: int) -> int:
    """The number of carries in the column addition of ``a`` and ``b``.

    Examples:
        >>> from advbudget.lab.lm import carries
        >>> carries(12, 34), carries(18, 34), carries(99, 1)
        (0, 1, 2)
    """
    count, carry = 0, 0
    while a or b:
        carry = (a % 10 + b % 10 + carry) // 10
        count += carry
        a, b = a // 10, b // 10
    return count


def tier_of(a: int, b: int) -> Tier:
    """``"routine"`` when the addition needs no carry, else ``"hard"``.

    Examples:
        >>> from advbudget.lab.lm import tier_of
        >>> tier_of(23, 45), tier_of(27, 45)
        ('routine', 'hard')
    """
    return "routine" if carries(a, b) == 0 else "hard"


@dataclass(frozen=True)
class TaskSplits:
    """Disjoint train, validation and test problems of each tier.

    ``a+b`` and ``b+a`` are one problem: both land in the same split, so no test problem
    is a train problem with its operands swapped.
    """

    train: dict[Tier, list[Problem]]
    validation: dict[Tier, list[Problem]]
    test: dict[Tier, list[Problem]]

    def split(self, name: str) -> dict[Tier, list[Problem]]:
        if name not in SPLITS:
            raise ValueError(f"split: expected one of {SPLITS}, got {name!r}")
        result: dict[Tier, list[Problem]] = getattr(self, name)
        return result


def make_splits(
    digits: int = 2, *, validation_per_tier: int = 64, test_per_tier: int = 256, seed: int = 0
) -> TaskSplits:
    """Every ``digits``-digit addition without overflow, split per tier and shuffled by ``seed``.

    Examples:
        >>> from advbudget.lab.lm import make_splits
        >>> splits = make_splits(2, validation_per_tier=50, test_per_tier=100)
        >>> [len(splits.test[t]) for t in ("routine", "hard")]
        [100, 100]
        >>> problem = splits.train["hard"][0]
        >>> problem.tier, problem.a + problem.b < 100
        ('hard', True)
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= MAX_DIGITS:
        raise ValueError(f"digits: expected an int in 1..{MAX_DIGITS}, got {digits!r}")
    for name, value in (
        ("validation_per_tier", validation_per_tier),
        ("test_per_tier", test_per_tier),
    ):
        int_at_least(name, value, 1)
    low, high = (10 ** (digits - 1) if digits > 1 else 0), 10**digits
    # Unordered pairs {a, b}: a problem and its swap stay together.
    pairs: dict[Tier, list[tuple[int, int]]] = {"routine": [], "hard": []}
    for a in range(low, high):
        for b in range(a, min(high, high - a)):
            pairs[tier_of(a, b)].append((a, b))
    rng = random.Random(seed)
    out: dict[str, dict[Tier, list[Problem]]] = {name: {} for name in SPLITS}
    for tier in TIERS:
        group = pairs[tier]
        rng.shuffle(group)
        problems = [
            [Problem(a, b, tier)] + ([Problem(b, a, tier)] if a != b else []) for a, b in group
        ]
        # Whole pairs go to test, then validation, until each has its size; the rest train.
        taken: dict[str, list[Problem]] = {name: [] for name in SPLITS}
        sizes = {"test": test_per_tier, "validation": validation_per_tier}
        index = 0
        for name in ("test", "validation"):
            while len(taken[name]) < sizes[name] and index < len(problems):
                taken[name].extend(problems[index])
                index += 1
            del taken[name][sizes[name] :]  # a swapped twin cut here goes nowhere else
        for chunk in problems[index:]:
            taken["train"].extend(chunk)
        if len(taken["train"]) < len(taken["test"]):
            raise ValueError(
                f"digits: {digits} gives {len(group)} {tier} pairs, too few for "
                f"validation_per_tier={validation_per_tier} and test_per_tier={test_per_tier}"
            )
        for name in SPLITS:
            out[name][tier] = taken[name]
    return TaskSplits(out["train"], out["validation"], out["test"])


def mixture(
    problems: dict[Tier, list[Problem]], count: int, hard_fraction: float, seed: int
) -> list[Problem]:
    """``count`` problems drawn with replacement, hard with probability ``hard_fraction``.

    Examples:
        >>> from advbudget.lab.lm import make_splits, mixture
        >>> drawn = mixture(make_splits(2).train, 1000, 0.25, seed=0)
        >>> sum(p.tier == "hard" for p in drawn)
        239
    """
    if not 0.0 <= hard_fraction <= 1.0:
        raise ValueError(f"hard_fraction: expected a number in [0, 1], got {hard_fraction!r}")
    rng = random.Random(seed)
    return [
        rng.choice(problems["hard" if rng.random() < hard_fraction else "routine"])
        for _ in range(count)
    ]
