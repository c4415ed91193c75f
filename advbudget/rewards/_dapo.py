r"""DAPO's answer rule: find the last ``Answer:`` line near the end, normalise, compare.

This is the rule DAPO trained with (verl's ``math_dapo`` scorer): only the last 300
characters of a response are read; the last ``Answer: ...`` line there is the answer;
answer and ground truth go through the same Minerva-style normalisation and must then be
equal as strings. It is strict on purpose: ``Answer: 34.`` is wrong, and ``\boxed{34}``
without an ``Answer:`` line scores as no answer at all.

References:
    DAPO: An Open-Source LLM Reinforcement Learning System at Scale, arXiv 2503.14476.
    Solving Quantitative Reasoning Problems with Language Models (Minerva, the
    normalisation), arXiv 2206.14858.
"""

from __future__ import annotations

import re

from ._checks import check_answer, check_real, check_str

TAIL_CHARS = 300
"""How much of the end of a response the rule reads (DAPO: the longest MATH-500 answer
has 159 characters)."""

# Case-insensitive; `\s*` may cross newlines, so "Answer:\n34" gives "34".
_ANSWER_LINE = re.compile(r"Answer\s*:\s*([^\n]+)", re.IGNORECASE)

# Plain-text rewrites, in this order ("an " must go before "a "). They run on the whole
# answer, so they also hit inside words ("banana split" loses its "a "): that is the rule.
_REWRITES: tuple[tuple[str, str], ...] = (
    ("an ", ""),  # articles: "a right triangle" -> "righttriangle"
    ("a ", ""),
    (".$", "$"),  # a full stop just inside closing math: "$34.$"
    ("\\$", ""),  # an escaped dollar: currency, not math
    ("\\ ", ""),  # LaTeX's forced space, then every plain space
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),  # "1, \text{and} 2" lists -> "1,2"
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),  # metres: left empty, then dropped below
)

# Units, filler words and LaTeX decorations deleted wherever they appear (order matters:
# "\text{}^2" before "\text{}").
_DELETIONS: tuple[str, ...] = (
    # units and counted things
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    # empty or unit-only \text{} left over by the rewrites
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    # ordinals, degree signs, thin spaces, digit-group separators, quotes, ellipses
    "\\mathrm{th}",
    "^\\circ",
    "^{\\circ}",
    "\\;",
    ",\\!",
    "{,}",
    '"',
    "\\dots",
)

# Keep only the first $...$ of a line (and its dollars, removed at the end).
_FIRST_MATH = re.compile(r".*?\$(.*?)\$.*")
# Unwrap these; \text{} and friends lazily (first closing brace), \boxed{} greedily (last).
_UNWRAP = (
    re.compile(r"\\text\{(.*?)\}"),
    re.compile(r"\\textbf\{(.*?)\}"),
    re.compile(r"\\overline\{(.*?)\}"),
    re.compile(r"\\boxed\{(.*)\}"),
)
# Shorthand TeX: \frac12 -> \frac{1}{2}, \sqrt2 -> \sqrt{2}.
_FRAC_SHORTHAND = re.compile(r"frac([^{])(.)")
_SQRT_SHORTHAND = re.compile(r"sqrt([^{])")


def extract_answer(response: str) -> str | None:
    """The answer a response gives by DAPO's rule, as written (not yet normalised).

    Only the last 300 characters are read; the answer is the rest of the line after the
    last ``Answer:`` there (any case, spaces allowed around the colon). ``None`` when there
    is no such line: an answer further back, or only a ``\\boxed{}``, does not count.

    Args:
        response: the model's response text.

    Returns:
        The text after the last ``Answer:`` in the last 300 characters, or ``None``.

    Examples:
        >>> from advbudget.rewards import extract_answer
        >>> extract_answer("First Answer: 12, no wait...\\nanswer : 34.")
        '34.'
        >>> extract_answer("The answer is \\\\boxed{34}.") is None
        True
    """
    check_str(response, "response")
    matches = _ANSWER_LINE.findall(response[-TAIL_CHARS:])
    return matches[-1] if matches else None


def normalize_answer(answer: str) -> str:
    r"""DAPO's (Minerva's) normalisation of an answer string, for exact comparison.

    In order: keep the text after the last ``=``; drop articles, spaces, ``\$``, units and
    filler words (``degrees``, ``cm``, ``dollars``, ...), ``\text{}`` leftovers, degree
    signs and thin spaces; keep only the first ``$...$``; unwrap ``\text{}``,
    ``\textbf{}``, ``\overline{}`` and ``\boxed{}``; expand ``\frac12`` and ``\sqrt2``;
    drop ``$``; drop the commas of a plain integer (``1,000``); strip.

    It does not touch a trailing full stop (``34.`` stays ``34.``), nor make ``1/2``,
    ``0.5`` and ``\frac{1}{2}`` equal: the comparison stays a string comparison.

    Args:
        answer: an extracted answer or a ground truth.

    Returns:
        The normalised string.

    Examples:
        >>> from advbudget.rewards import normalize_answer
        >>> normalize_answer(r"x = \boxed{1,000} \text{ degrees}")
        '1000'
        >>> normalize_answer(r"$\frac12$"), normalize_answer("34.")
        ('\\frac{1}{2}', '34.')
    """
    check_str(answer, "answer")
    text = answer.split("=")[-1]
    for old, new in _REWRITES:
        text = text.replace(old, new)
    for junk in _DELETIONS:
        text = text.replace(junk, "")
    if text.count("$") >= 2:  # the regex cannot match otherwise, and is quadratic on a miss
        text = _FIRST_MATH.sub(r"$\1$", text)
    for wrapper in _UNWRAP:
        text = wrapper.sub(r"\1", text)
    text = _FRAC_SHORTHAND.sub(r"frac{\1}{\2}", text)
    text = _SQRT_SHORTHAND.sub(r"sqrt{\1}", text)
    text = text.replace("$", "")
    # str.isdigit, as in the rule (it also accepts other Unicode digits).
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def dapo_reward(
    response: str, ground_truth: str, *, correct: float = 1.0, wrong: float = -1.0
) -> float:
    r"""DAPO's reward: ``correct`` if the answer matches the ground truth exactly, else ``wrong``.

    The answer is :func:`extract_answer`'s; answer and ground truth are both
    :func:`normalize_answer`-ed and compared as strings. No answer line in the last 300
    characters is ``wrong``. Strict, as DAPO trained: ``Answer: 34.`` is wrong for 34, so
    is ``1/2`` for ``\frac{1}{2}``.

    Args:
        response: the model's response text.
        ground_truth: the reference answer (DAPO's are integer strings, e.g. ``"34"``).
        correct: the reward of a right answer.
        wrong: the reward of a wrong or missing one.

    Returns:
        ``correct`` or ``wrong``, as a float.

    Raises:
        TypeError: ``response`` or ``ground_truth`` is not a str.
        ValueError: ``ground_truth`` is empty.

    References:
        DAPO, arXiv 2503.14476 (rule-based reward, Eq. 7).

    Examples:
        >>> from advbudget.rewards import dapo_reward
        >>> dapo_reward("... so x = 34.\nAnswer: $34$", "34")
        1.0
        >>> dapo_reward("... so x = 34.\nAnswer: 34.", "34")
        -1.0
        >>> dapo_reward("Answer: 35", "34", correct=1.0, wrong=0.0)
        0.0
    """
    check_str(response, "response")
    check_answer(ground_truth, "ground_truth")
    correct = check_real(correct, "correct")
    wrong = check_real(wrong, "wrong")
    return correct if grade_dapo(response, ground_truth)[0] else wrong


def grade_dapo(response: str, ground_truth: str) -> tuple[bool, str | None]:
    """(correct, the normalised answer or None); arguments already checked."""
    answer = extract_answer(response)
    if answer is None:
        return False, None
    answer = normalize_answer(answer)
    return answer == normalize_answer(ground_truth), answer
