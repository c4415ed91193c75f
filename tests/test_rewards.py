r"""advbudget.rewards: DAPO's answer rule, math-verify, the overlong penalty, and the verl,
TRL and OpenRLHF wrappers called the way each framework calls them.

The grading table gives every case's expected reward under both graders. They disagree
often, by design: DAPO's rule is an exact string match on the last ``Answer:`` line of
the last 300 characters; math-verify reads the whole response and compares SymPy values.
Each disagreement says why in its ``why``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import pickle
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import advbudget.rewards as rewards_package
from advbudget.rewards import _math_verify as math_verify_module
from advbudget.rewards import (
    dapo_reward,
    extract_answer,
    is_correct,
    math_verify_reward,
    normalize_answer,
    overlong_penalty,
)
from advbudget.rewards import trl as trl_rewards
from advbudget.rewards import verl as verl_rewards

REWARDS_DIR = Path(rewards_package.__file__).parent
OPENRLHF_REWARD_FILE = REWARDS_DIR.parent / "adapters" / "openrlhf" / "rewards.py"
AIME_PARQUET = Path(__file__).parents[2] / "shared" / "data" / "dapo-aime-2024.parquet"

# Reasoning before the answer, with no number in it: math-verify falls back to the last
# number or expression of a response, and a stray "34" here would grade every case.
R = "Let me work through the problem step by step.\n"
# 400 characters of prose with no number: pushes an answer out of DAPO's 300-char window.
TAIL_400 = "\n" + ("Checking the arithmetic once more confirms it. " * 9)[:399]
LONG_REASONING = "Some careful reasoning about the problem. " * 20  # 840 characters


class Case(NamedTuple):
    id: str
    response: str
    truth: str
    dapo: float  # dapo_reward with the default +1 / -1
    math_verify: float  # math_verify_reward: 1 / 0
    why: str = ""  # required when the two graders disagree


CASES = [
    # Plain answers.
    Case("correct", R + "Answer: 34", "34", 1.0, 1.0),
    Case("wrong", R + "Answer: 35", "34", -1.0, 0.0),
    Case("negative", R + "Answer: -7", "-7", 1.0, 1.0),
    Case("negative-in-math", R + "Answer: $-7$", "-7", 1.0, 1.0),
    Case("negative-wrong-sign", R + "Answer: 7", "-7", -1.0, 0.0),
    Case("empty-response", "", "34", -1.0, 0.0),
    Case("no-answer", R + "I could not finish.", "34", -1.0, 0.0),
    Case("answer-in-words", R + "Answer: thirty-four", "34", -1.0, 0.0),
    # Formatting traps.
    Case(
        "trailing-period",
        R + "Answer: 34.",
        "34",
        -1.0,
        1.0,
        "DAPO keeps the full stop ('34.' != '34'); math-verify parses the number",
    ),
    Case("dollars", R + "Answer: $34$", "34", 1.0, 1.0),
    Case("dollars-period-inside", R + "Answer: $34.$", "34", 1.0, 1.0),
    Case("dollars-period-outside", R + "Answer: $34$.", "34", 1.0, 1.0),
    Case("boxed-in-answer-line", R + "Answer: \\boxed{34}", "34", 1.0, 1.0),
    Case(
        "boxed-only",
        R + "So the answer is \\boxed{34}.",
        "34",
        -1.0,
        1.0,
        "no Answer: line is no answer for DAPO; math-verify reads \\boxed{} first",
    ),
    Case(
        "boxed-and-answer-line-disagree",
        R + "\\boxed{12}\nAnswer: 34",
        "34",
        1.0,
        0.0,
        "DAPO reads only the Answer: line; math-verify prefers the \\boxed{12}",
    ),
    Case("unclosed-boxed", R + "Answer: \\boxed{34", "34", -1.0, 0.0),
    Case(
        "markdown-bold-answer",
        R + "**Answer:** 34",
        "34",
        -1.0,
        1.0,
        "DAPO captures '** 34' and keeps the stars; math-verify finds the number",
    ),
    Case(
        "final-answer-phrase",
        R + "The final answer is 34.",
        "34",
        -1.0,
        1.0,
        "no 'Answer:' with a colon for DAPO; math-verify knows 'final answer is'",
    ),
    Case(
        "last-number-fallback",
        R + "Adding the two parts we get 34 in the end.",
        "34",
        -1.0,
        1.0,
        "no Answer: line for DAPO; math-verify falls back to the last number",
    ),
    Case(
        "last-expression-fallback",
        R + "The sum is 12 + 22.",
        "34",
        -1.0,
        1.0,
        "no Answer: line for DAPO; math-verify evaluates the last expression, 12 + 22",
    ),
    # Units.
    Case("units-degrees", R + "Answer: 34 degrees", "34", 1.0, 1.0),
    Case("units-circ", R + "Answer: 34^\\circ", "34", 1.0, 1.0),
    Case("units-cm", R + "Answer: 34 cm", "34", 1.0, 1.0),
    Case("units-dollars-word", R + "Answer: 34 dollars", "34", 1.0, 1.0),
    Case(
        "currency-escaped-dollar",
        R + "Answer: \\$34",
        "34",
        1.0,
        0.0,
        "DAPO deletes '\\$'; math-verify does not parse '\\$34' outside math",
    ),
    # Under the pinned antlr 4.13.2; the notes say 4.9.3 reads "50\%" differently (as 0.5).
    Case(
        "percent",
        R + "Answer: 50\\%",
        "50",
        -1.0,
        1.0,
        "DAPO keeps '\\%'; math-verify drops the percent sign",
    ),
    # Thousands separators.
    Case("thousands-comma", R + "Answer: 1,000", "1000", 1.0, 1.0),
    Case("thousands-comma-in-truth", R + "Answer: 1000", "1,000", 1.0, 1.0),
    Case(
        "thousands-latex-comma",
        R + "Answer: 1{,}000",
        "1000",
        1.0,
        0.0,
        "DAPO deletes '{,}'; math-verify reads '1{,}000' outside math as 1",
    ),
    Case("thousands-space", R + "Answer: 1 000", "1000", 1.0, 1.0),
    Case(
        "negative-with-comma",
        R + "Answer: -1,234",
        "-1234",
        -1.0,
        1.0,
        "DAPO drops commas only from plain digit strings, and '-1,234' has a minus",
    ),
    # Fractions, roots, other forms of the same number.
    Case("frac", R + "Answer: \\frac{1}{2}", "\\frac{1}{2}", 1.0, 1.0),
    Case(
        "frac-shorthand",
        R + "Answer: \\frac12",
        "\\frac{1}{2}",
        1.0,
        0.0,
        "DAPO expands \\frac12; math-verify does not parse LaTeX outside $...$",
    ),
    Case("frac-shorthand-in-math", R + "Answer: $\\frac12$", "\\frac{1}{2}", 1.0, 1.0),
    Case(
        "frac-slash",
        R + "Answer: 1/2",
        "\\frac{1}{2}",
        -1.0,
        1.0,
        "DAPO compares strings, '1/2' != '\\frac{1}{2}'; math-verify compares values",
    ),
    Case(
        "frac-decimal",
        R + "Answer: 0.5",
        "\\frac{1}{2}",
        -1.0,
        1.0,
        "DAPO compares strings; math-verify compares values",
    ),
    Case(
        "dfrac",
        R + "Answer: $\\dfrac{1}{2}$",
        "\\frac{1}{2}",
        -1.0,
        1.0,
        "DAPO does not rewrite \\dfrac; math-verify parses it",
    ),
    Case("sqrt-shorthand", R + "Answer: $\\sqrt2$", "\\sqrt{2}", 1.0, 1.0),
    Case("sqrt-latex-truth", R + "Answer: $3\\sqrt{3}$", "3\\sqrt{3}", 1.0, 1.0),
    Case("sqrt-latex-truth-wrong", R + "Answer: $3$", "3\\sqrt{3}", -1.0, 0.0),
    Case("pi", R + "Answer: $2\\pi$", "2\\pi", 1.0, 1.0),
    Case("interval", R + "Answer: $[0, 1)$", "[0,1)", 1.0, 1.0),
    Case(
        "leading-zero",
        R + "Answer: 034",
        "34",
        -1.0,
        1.0,
        "DAPO compares strings; math-verify compares values",
    ),
    Case(
        "float-form",
        R + "Answer: 34.0",
        "34",
        -1.0,
        1.0,
        "DAPO compares strings; math-verify compares values",
    ),
    Case(
        "power",
        R + "Answer: $2^{10}$",
        "1024",
        -1.0,
        1.0,
        "DAPO compares strings; math-verify evaluates 2^{10}",
    ),
    # Minus signs.
    Case(
        "minus-with-space",
        R + "Answer: - 7",
        "-7",
        1.0,
        0.0,
        "DAPO deletes spaces; math-verify reads '- 7' as 7, dropping the detached minus",
    ),
    Case("unicode-minus", R + "Answer: \u22127", "-7", -1.0, 0.0),
    Case(
        "unicode-minus-in-math",
        R + "Answer: $\u22127$",
        "-7",
        -1.0,
        1.0,
        "DAPO compares strings, U+2212 is not '-'; math-verify's LaTeX parser maps it",
    ),
    # Equations in the answer: the text after the last '=' counts.
    Case("assignment", R + "Answer: x = 5", "5", 1.0, 1.0),
    Case("assignment-in-math", R + "Answer: $x = 5$", "5", 1.0, 1.0),
    Case("equation-in-answer", R + "Answer: 12 + 22 = 34", "34", 1.0, 1.0),
    Case("explanation-after-answer", R + "Answer: 34 because 12 + 22 = 34", "34", 1.0, 1.0),
    # Several Answer lines: the last counts, for both.
    Case("several-answers-last-right", R + "Answer: 12\nWait, a slip.\nAnswer: 34", "34", 1.0, 1.0),
    Case(
        "several-answers-last-wrong", R + "Answer: 34\nWait, a slip.\nAnswer: 12", "34", -1.0, 0.0
    ),
    # The 300-character window.
    Case(
        "answer-beyond-last-300-chars",
        R + "Answer: 34" + TAIL_400,
        "34",
        -1.0,
        1.0,
        "DAPO reads only the last 300 characters; math-verify reads everything",
    ),
    Case("long-response-answer-at-end", R + LONG_REASONING + "\nAnswer: 34", "34", 1.0, 1.0),
    # Case and whitespace.
    Case("lowercase", R + "answer: 34", "34", 1.0, 1.0),
    Case("uppercase", R + "ANSWER: 34", "34", 1.0, 1.0),
    Case("space-before-colon", R + "Answer : 34", "34", 1.0, 1.0),
    Case(
        "no-space-after-colon",
        R + "Answer:34",
        "34",
        1.0,
        0.0,
        "DAPO allows no space; math-verify needs a space or start before a bare number",
    ),
    Case("answer-on-next-line", R + "Answer:\n34", "34", 1.0, 1.0),
    Case("trailing-spaces", R + "Answer:   34   ", "34", 1.0, 1.0),
    Case("tab", R + "Answer:\t34", "34", 1.0, 1.0),
    # \text{} answers.
    Case(
        "text-number",
        R + "Answer: \\text{34}",
        "34",
        1.0,
        0.0,
        "DAPO unwraps \\text{}; math-verify does not parse \\text{34} outside math",
    ),
    Case(
        "text-choice",
        R + "Answer: \\text{(B)}",
        "(B)",
        1.0,
        0.0,
        "DAPO unwraps \\text{}; math-verify extracts nothing from \\text{} outside math",
    ),
    Case(
        "text-word",
        R + "Answer: \\text{Evelyn}",
        "\\text{Evelyn}",
        1.0,
        0.0,
        "DAPO compares the bare word; math-verify extracts nothing from \\text{} outside math",
    ),
]


def case_params() -> list[Any]:
    return [pytest.param(case, id=case.id) for case in CASES]


@pytest.mark.parametrize("case", case_params())
def test_dapo_reward(case: Case) -> None:
    assert dapo_reward(case.response, case.truth) == case.dapo
    assert is_correct(case.response, case.truth) is (case.dapo > 0)


@pytest.mark.parametrize("case", case_params())
def test_math_verify_reward(case: Case) -> None:
    assert math_verify_reward(case.response, case.truth) == case.math_verify
    assert is_correct(case.response, case.truth, method="math_verify") is (case.math_verify > 0)


def test_grading_table() -> None:
    assert len(CASES) >= 40
    assert len({case.id for case in CASES}) == len(CASES), "case ids must be unique"
    for case in CASES:
        disagree = (case.dapo > 0) != (case.math_verify > 0)
        assert disagree == bool(case.why), f"{case.id}: give a why exactly when they disagree"


# --- DAPO's rule, piece by piece ---------------------------------------------------------


@pytest.mark.parametrize(
    ("tail_chars", "expected"),
    [
        pytest.param(290, "34", id="answer-starts-300-from-end"),
        pytest.param(291, None, id="answer-starts-301-from-end"),
    ],
)
def test_extract_answer_reads_the_last_300_characters(tail_chars: int, expected: Any) -> None:
    response = R + "Answer: 34" + "\n" + "x" * (tail_chars - 1)
    assert len(response) - response.index("Answer") == 10 + tail_chars
    assert extract_answer(response) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        pytest.param("Answer: 34", "34", id="plain"),
        pytest.param("answer : 34.", "34.", id="lowercase-kept-as-written"),
        pytest.param("Answer: 1\nAnswer: 2\nAnswer: 3", "3", id="last-of-several"),
        pytest.param("Answer:\n\n  34", "34", id="spaces-and-newlines-after-colon"),
        pytest.param("Answer: ", " ", id="only-a-space-after-colon"),  # [^\n]+ takes the space
        pytest.param("The answer is 34", None, id="no-colon"),
        pytest.param("", None, id="empty"),
    ],
)
def test_extract_answer(response: str, expected: str | None) -> None:
    assert extract_answer(response) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param("34", "34", id="integer"),
        pytest.param(" 34 ", "34", id="spaces"),
        pytest.param("34.", "34.", id="full-stop-kept"),
        pytest.param("$34.$", "34", id="full-stop-inside-math-dropped"),
        pytest.param("x = y = 34", "34", id="after-last-equals"),
        pytest.param("1,000,000", "1000000", id="thousands"),
        pytest.param("-1,000", "-1,000", id="thousands-negative-kept"),
        pytest.param("1{,}000", "1000", id="latex-thousands"),
        pytest.param("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", id="boxed-greedy"),
        pytest.param("\\frac12", "\\frac{1}{2}", id="frac-shorthand"),
        pytest.param("\\sqrt3", "\\sqrt{3}", id="sqrt-shorthand"),
        pytest.param("\\text{(B)}", "(B)", id="text"),
        pytest.param("\\textbf{34}", "34", id="textbf"),
        pytest.param("\\overline{34}", "34", id="overline"),
        pytest.param("$1$ and $2$", "1", id="first-math-only"),
        pytest.param("90^{\\circ}", "90", id="degree-sign"),
        pytest.param("5 \\text{ cm}^2", "5", id="unit-squared"),
        pytest.param("banana split", "banansplit", id="articles-deleted-inside-words"),
    ],
)
def test_normalize_answer(answer: str, expected: str) -> None:
    assert normalize_answer(answer) == expected


@given(st.text(), st.text(min_size=300))
def test_extract_answer_reads_nothing_before_the_window(prefix: str, tail: str) -> None:
    assert extract_answer(prefix + tail) == extract_answer(tail)


@given(st.integers(-(10**12), 10**12), st.text(alphabet=st.characters(exclude_characters="\n")))
def test_any_integer_answer_line_is_right(value: int, reasoning: str) -> None:
    response = reasoning + "\nAnswer: " + str(value)
    assert dapo_reward(response, str(value)) == 1.0
    assert dapo_reward(response, str(value + 1)) == -1.0


def test_dapo_reward_values() -> None:
    assert dapo_reward("Answer: 34", "34", correct=2.0, wrong=0.0) == 2.0
    assert dapo_reward("Answer: 35", "34", correct=2.0, wrong=0) == 0.0
    assert type(dapo_reward("Answer: 35", "34", wrong=0)) is float


# --- Bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "grader",
    [
        pytest.param(dapo_reward, id="dapo_reward"),
        pytest.param(math_verify_reward, id="math_verify_reward"),
        pytest.param(is_correct, id="is_correct"),
    ],
)
def test_graders_refuse_bad_input(grader: Any) -> None:
    with pytest.raises(TypeError, match=r"^ground_truth: expected a str, got int 34$"):
        grader("Answer: 34", 34)
    with pytest.raises(TypeError, match=r"^response: expected a str, got NoneType None$"):
        grader(None, "34")
    with pytest.raises(TypeError, match=r"^response: expected a str, got list \['Answer: 34'\]$"):
        grader(["Answer: 34"], "34")
    with pytest.raises(ValueError, match=r"^ground_truth: expected a non-empty answer, got ''$"):
        grader("Answer: 34", "")
    with pytest.raises(ValueError, match=r"^ground_truth: expected a non-empty answer, got ' '$"):
        grader("Answer: 34", " ")


def test_bad_input_elsewhere() -> None:
    # Typed Any: wrong types on purpose.
    data: Any = b"Answer: 34"
    number: Any = 34.0
    with pytest.raises(TypeError, match=r"^response: expected a str, got bytes b'Answer: 34'$"):
        extract_answer(data)
    with pytest.raises(TypeError, match=r"^answer: expected a str, got float 34.0$"):
        normalize_answer(number)
    with pytest.raises(TypeError, match=r"^correct: expected a real number, got bool True$"):
        dapo_reward("Answer: 34", "34", correct=True)
    with pytest.raises(ValueError, match=r"^wrong: expected a finite number, got nan$"):
        dapo_reward("Answer: 34", "34", wrong=float("nan"))
    long: Any = b"x" * 500  # the message shows a shortened repr
    with pytest.raises(TypeError, match=r"^response: expected a str, got bytes b'x+\.\.\.$"):
        dapo_reward(long, "34")


@pytest.mark.parametrize("method", ["sympy", "DAPO", "", None])
def test_is_correct_unknown_method(method: Any) -> None:
    with pytest.raises(
        ValueError, match=rf"^method: expected 'dapo' or 'math_verify', got {method!r}$"
    ):
        is_correct("Answer: 34", "34", method=method)


# --- math-verify details -----------------------------------------------------------------


def test_math_verify_unparseable_truth_scores_zero() -> None:
    assert math_verify_reward("Answer: ???", "???") == 0.0


def test_math_verify_reads_latex_truths_as_math() -> None:
    # Bare, "3\sqrt{3}" parses as 3 and "\sqrt{2}" not at all: the truth is read as $...$.
    assert math_verify_reward("Answer: $3$", "3\\sqrt{3}") == 0.0
    assert math_verify_reward("so $\\sqrt{2}$", "\\sqrt{2}") == 1.0
    assert math_verify_reward("so $\\sqrt{2}$", "$\\sqrt{2}$") == 1.0
    assert math_verify_reward("so $\\sqrt{2}$", "\\boxed{\\sqrt{2}}") == 1.0


def test_math_verify_in_threads_matches_the_main_thread() -> None:
    expected = [math_verify_reward(case.response, case.truth) for case in CASES]
    assert expected == [case.math_verify for case in CASES]
    with ThreadPoolExecutor(max_workers=4) as pool:
        in_pool = list(pool.map(lambda case: math_verify_reward(case.response, case.truth), CASES))
    assert in_pool == expected

    results: list[Any] = []

    def grade_all() -> None:
        try:
            results.extend(is_correct(c.response, c.truth, method="math_verify") for c in CASES)
        except Exception as error:  # surfaced below: an exception in a thread is lost
            results.append(error)

    thread = threading.Thread(target=grade_all)
    thread.start()
    thread.join()
    assert results == [value > 0 for value in expected]


def test_math_verify_timeouts_only_in_the_main_thread() -> None:
    # signal.alarm cannot be set from another thread: math-verify raises there unless
    # its timeouts are off.
    assert math_verify_module._timeouts() == (5, 5)
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(math_verify_module._timeouts).result() == (None, None)


# --- The overlong penalty ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "max_length", "buffer", "factor", "expected"),
    [
        pytest.param(0, 4096, 512, 1.0, 0.0, id="empty"),
        pytest.param(3000, 4096, 512, 1.0, 0.0, id="short"),
        pytest.param(3584, 4096, 512, 1.0, 0.0, id="at-threshold"),
        pytest.param(3585, 4096, 512, 1.0, -1 / 512, id="one-past-threshold"),
        pytest.param(3840, 4096, 512, 1.0, -0.5, id="half-way"),
        pytest.param(4096, 4096, 512, 1.0, -1.0, id="at-max"),
        pytest.param(4096, 4096, 512, 0.5, -0.5, id="factor"),
        pytest.param(4096, 4096, 512, 0.0, 0.0, id="factor-zero"),
        pytest.param(4608, 4096, 512, 1.0, -2.0, id="past-max-keeps-the-slope"),
        pytest.param(256, 512, 512, 1.0, -0.5, id="buffer-is-everything"),
        pytest.param(16384, 20480, 4096, 1.0, 0.0, id="dapo-settings-threshold"),
        pytest.param(18432, 20480, 4096, 1.0, -0.5, id="dapo-settings-half-way"),
        pytest.param(np.int64(3840), np.int32(4096), 512, 1, -0.5, id="numpy-ints"),
        pytest.param(torch.tensor(3840), 4096, 512, 1.0, -0.5, id="torch-0d-int"),
    ],
)
def test_overlong_penalty(
    length: Any, max_length: Any, buffer: int, factor: float, expected: float
) -> None:
    penalty = overlong_penalty(length, max_length, buffer, factor)
    assert penalty == pytest.approx(expected, abs=1e-15)
    assert type(penalty) is float
    assert str(penalty) != "-0.0"


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        pytest.param(
            (-1, 4096, 512),
            ValueError,
            r"^length: expected a token count >= 0, got -1$",
            id="negative-length",
        ),
        pytest.param(
            (10, 4096, 0),
            ValueError,
            r"^buffer: expected a token count > 0, got 0$",
            id="zero-buffer",
        ),
        pytest.param(
            (10, 4096, -5),
            ValueError,
            r"^buffer: expected a token count > 0, got -5$",
            id="negative-buffer",
        ),
        pytest.param(
            (10, 4096, 5000),
            ValueError,
            r"^buffer: expected at most max_length = 4096 tokens, got 5000$",
            id="buffer-over-max",
        ),
        pytest.param(
            (10, 4096, 512, -1.0),
            ValueError,
            r"^factor: expected a number >= 0, got -1.0$",
            id="negative-factor",
        ),
        pytest.param(
            (10, 4096, 512, float("inf")),
            ValueError,
            r"^factor: expected a finite number, got inf$",
            id="inf-factor",
        ),
        pytest.param(
            (3.5, 4096, 512),
            TypeError,
            r"^length: expected an int \(a token count\), got float 3.5$",
            id="float-length",
        ),
        pytest.param(
            (True, 4096, 512),
            TypeError,
            r"^length: expected an int \(a token count\), got bool True$",
            id="bool-length",
        ),
        pytest.param(
            (10, "4096", 512),
            TypeError,
            r"^max_length: expected an int \(a token count\), got str '4096'$",
            id="str-max-length",
        ),
        pytest.param(
            (10, 4096, 512, "1"),
            TypeError,
            r"^factor: expected a real number, got str '1'$",
            id="str-factor",
        ),
    ],
)
def test_overlong_penalty_errors(
    args: tuple[Any, ...], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        overlong_penalty(*args)


# --- The real data: DAPO's AIME-2024 file -------------------------------------------------


def test_dapo_aime_2024_ground_truths() -> None:
    if not AIME_PARQUET.exists():
        pytest.skip(f"{AIME_PARQUET} is not there")
    pandas = pytest.importorskip("pandas")
    frame = pandas.read_parquet(AIME_PARQUET)
    assert len(frame) == 960
    truths = sorted({row["ground_truth"] for row in frame["reward_model"]})
    assert 1 < len(truths) <= 30
    for truth in truths:
        assert isinstance(truth, str)
        assert truth.lstrip("-").isdigit(), truth  # DAPO's ground truths are integer strings
        right = "...reasoning...\nAnswer: " + truth
        wrong = "...reasoning...\nAnswer: " + str(int(truth) + 1)
        assert dapo_reward(right, truth) == 1.0, truth
        assert dapo_reward(wrong, truth) == -1.0, truth
        assert math_verify_reward(right, truth) == 1.0, truth
        assert math_verify_reward(wrong, truth) == 0.0, truth
        # And through verl's wrapper, with the data_source the file carries.
        source = frame["data_source"].iloc[0]
        assert verl_rewards.compute_score(source, right, truth)["acc"] is True


# --- verl --------------------------------------------------------------------------------


def test_verl_compute_score() -> None:
    result = verl_rewards.compute_score(
        data_source="math_dapo",
        solution_str=R + "Answer: $34$",
        ground_truth="34",
        extra_info={"index": "0", "num_turns": None},
    )
    # reward_failure / reward_timeout: in every result (verl's metrics need every key in
    # every sample), 1.0 when the grader raised or ran past its timeout.
    ok = {"reward_failure": 0.0, "reward_timeout": 0.0}
    assert result == {"score": 1.0, "acc": True, "pred": "34", **ok}
    assert type(result["score"]) is float
    assert type(result["acc"]) is bool

    result = verl_rewards.compute_score("math_dapo", R + "Answer: 34.", "34")
    assert result == {"score": -1.0, "acc": False, "pred": "34.", **ok}
    result = verl_rewards.compute_score("math_dapo", R + "Answer: 34.", "34", method="math_verify")
    assert result == {"score": 1.0, "acc": True, "pred": "34", **ok}


def test_verl_pred_is_always_a_str() -> None:
    # verl's validation metrics skip a key when its first value is a str and average it
    # otherwise: a None pred would make them fail.
    for method in ("dapo", "math_verify"):
        result = verl_rewards.compute_score("aime", "I give up.", "34", None, method=method)
        assert result["pred"] == ""
        assert result["acc"] is False


def test_verl_options_and_ground_truth_types() -> None:
    call: Any = verl_rewards.compute_score  # Any: wrong types on purpose
    assert call("math_dapo", "Answer: 34", 34)["acc"] is True
    assert call("math_dapo", "Answer: 34", np.int64(34))["acc"] is True
    assert call("math_dapo", "Answer: -7", -7, method="math_verify")["acc"] is True
    assert call("math_dapo", "Answer: 35", "34", correct=1, wrong=0)["score"] == 0.0
    with pytest.raises(TypeError, match=r"^ground_truth: expected a str, got float 34.0$"):
        call("math_dapo", "Answer: 34", 34.0)
    with pytest.raises(TypeError, match=r"^ground_truth: expected a str, got NoneType None$"):
        call("math_dapo", "Answer: 34", None)
    with pytest.raises(TypeError, match=r"^solution_str: expected a str, got int 34$"):
        call("math_dapo", 34, "34")
    with pytest.raises(ValueError, match=r"^ground_truth: expected a non-empty answer"):
        call("math_dapo", "Answer: 34", "")
    with pytest.raises(
        ValueError, match=r"^method: expected 'dapo' or 'math_verify', got 'sympy'$"
    ):
        call("math_dapo", "Answer: 34", "34", method="sympy")


def test_verl_keywords() -> None:
    # Keywords verl itself adds are accepted quietly, unknown ones with a warning.
    result = verl_rewards.compute_score(
        "math_dapo", "Answer: 34", "34", reward_router_address=None, reward_model_tokenizer=None
    )
    assert result["acc"] is True
    with pytest.warns(UserWarning, match="ignoring the unknown keyword 'metod'"):
        verl_rewards.compute_score("math_dapo", "Answer: 34", "34", metod="math_verify")


def test_verl_overlong_penalty() -> None:
    call = verl_rewards.compute_score
    settings: dict[str, Any] = {"overlong_buffer": 512, "max_response_length": 4096}
    assert call("math_dapo", "Answer: 34", "34", response_length=3840, **settings) == {
        "score": 0.5,
        "acc": True,
        "pred": "34",
        "overlong_penalty": -0.5,
        "reward_failure": 0.0,
        "reward_timeout": 0.0,
    }
    by_extra_info = call("math_dapo", "Answer: 35", "34", {"response_length": 4096}, **settings)
    assert by_extra_info["score"] == -2.0
    assert call("math_dapo", "Answer: 34", "34", response_length=10, **settings)["score"] == 1.0
    halved = call(
        "math_dapo", "Answer: 34", "34", response_length=4096, overlong_factor=0.5, **settings
    )
    assert halved["score"] == 0.5
    # Tokens only: never estimated from the text.
    with pytest.raises(ValueError, match=r"^response_length: the overlong penalty needs"):
        call("math_dapo", "Answer: 34", "34", {"index": 0}, **settings)
    with pytest.raises(ValueError, match=r"^max_response_length: expected a token count"):
        call("math_dapo", "Answer: 34", "34", overlong_buffer=512, response_length=10)
    with pytest.raises(ValueError, match=r"^buffer: expected at most max_length = 256 tokens"):
        call(
            "math_dapo",
            "Answer: 34",
            "34",
            response_length=10,
            overlong_buffer=512,
            max_response_length=256,
        )


def test_verl_loads_by_file_path_and_runs_in_a_thread() -> None:
    # How verl loads custom_reward_function.path, and how its reward loop calls the
    # function (in an executor thread).
    spec = importlib.util.spec_from_file_location("custom_module_test", REWARDS_DIR / "verl.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def score(response: str, truth: str) -> dict[str, Any]:
        result: dict[str, Any] = module.compute_score(
            data_source="math_dapo",
            solution_str=response,
            ground_truth=truth,
            extra_info={},
            method="math_verify",
        )
        return result

    async def score_all() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        return await asyncio.gather(
            *(
                loop.run_in_executor(None, partial(score, case.response, case.truth))
                for case in CASES
            )
        )

    results = asyncio.run(score_all())
    assert [r["acc"] for r in results] == [case.math_verify > 0 for case in CASES]
    assert all(isinstance(r["pred"], str) for r in results)


# --- TRL ---------------------------------------------------------------------------------


def trl_call(function: Any, completions: list[Any], solution: list[Any]) -> Any:
    """Call a reward function as GRPOTrainer does: every argument by keyword, extra columns
    and trainer objects included."""
    return function(
        prompts=[[{"role": "user", "content": "Solve it."}]] * len(completions),
        completions=completions,
        completion_ids=[[1, 2, 3]] * len(completions),
        solution=solution,
        data_source=["math_dapo"] * len(completions),
        trainer_state=object(),
        log_extra=lambda column, values: None,
        log_metric=lambda name, value: None,
    )


def test_trl_dapo_accuracy() -> None:
    chats = [
        [{"role": "assistant", "content": R + "Answer: 34"}],
        [{"role": "assistant", "content": R + "Answer: 34."}],
        [{"role": "assistant", "content": R + "Answer: 34"}],
        [{"role": "assistant", "content": R + "Answer: 34"}],
        [{"role": "assistant", "content": R + "Answer: 34"}],
        [{"role": "assistant", "content": None}],
    ]
    truths = ["34", "34", 34, None, "  ", "34"]
    assert trl_call(trl_rewards.dapo_accuracy, chats, truths) == [1.0, 0.0, 1.0, None, None, 0.0]
    texts = [R + "Answer: 1/2", R + "Answer: \\frac12"]
    assert trl_call(trl_rewards.dapo_accuracy, texts, ["\\frac{1}{2}"] * 2) == [0.0, 1.0]


def test_trl_math_verify_accuracy() -> None:
    texts = [R + "Answer: 1/2", R + "Answer: \\frac12", R + "so 34.", R + "Answer: 7"]
    truths = ["\\frac{1}{2}", "\\frac{1}{2}", 34, ""]
    assert trl_call(trl_rewards.math_verify_accuracy, texts, truths) == [1.0, 0.0, 1.0, None]


def test_trl_completion_forms() -> None:
    multimodal = [{"role": "assistant", "content": [{"type": "text", "text": "Answer: 34"}]}]
    tool_then_answer = [
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "content": "34"},
        {"role": "assistant", "content": "Answer: 34"},
    ]
    result = trl_call(trl_rewards.dapo_accuracy, [multimodal, tool_then_answer], ["34", "34"])
    assert result == [1.0, 1.0]


def test_trl_bad_input() -> None:
    with pytest.raises(
        ValueError, match=r"^solution: expected one ground truth per completion \(2\), got 1$"
    ):
        trl_rewards.dapo_accuracy(["Answer: 34", "Answer: 34"], ["34"])
    with pytest.raises(
        TypeError, match=r"^completions\[1\]: expected a str or a list of chat messages"
    ):
        trl_rewards.dapo_accuracy(["Answer: 34", 34], ["34", "34"])
    with pytest.raises(
        TypeError, match=r"^solution\[0\]: expected a str or an int, got float 34.0$"
    ):
        trl_rewards.math_verify_accuracy(["Answer: 34"], [34.0])


def test_trl_overlong_penalty_reward() -> None:
    penalty = trl_rewards.overlong_penalty_reward(max_length=8, buffer=4, factor=0.5)
    assert penalty.__name__ == "overlong_penalty"
    completion_ids = [[1] * 3, [1] * 4, [1] * 6, [1] * 8]
    assert trl_call(penalty, ["x"] * 4, ["34"] * 4) == [0.0] * 4  # 3 tokens each
    assert penalty(completion_ids=completion_ids) == [0.0, 0.0, -0.25, -0.5]
    clone = pickle.loads(pickle.dumps(penalty))
    assert clone(completion_ids=completion_ids) == [0.0, 0.0, -0.25, -0.5]
    with pytest.raises(
        ValueError, match=r"^buffer: expected at most max_length = 8 tokens, got 9$"
    ):
        trl_rewards.overlong_penalty_reward(max_length=8, buffer=9)


# --- OpenRLHF ----------------------------------------------------------------------------


def load_openrlhf_file() -> ModuleType:
    """Load the file as OpenRLHF does for --reward.remote_url."""
    spec = importlib.util.spec_from_file_location("reward_func", OPENRLHF_REWARD_FILE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROMPT = "<|im_start|>user\nWhat is 12 + 22?<|im_end|>\n<|im_start|>assistant\n"


def test_openrlhf_earlier_reward_file_loads_by_path() -> None:
    """``--reward.remote_url .../advbudget/rewards/openrlhf.py`` in earlier commands: loaded
    by path, it grades as the file it points to now."""
    spec = importlib.util.spec_from_file_location("reward_func", REWARDS_DIR / "openrlhf.py")
    assert spec is not None
    assert spec.loader is not None
    earlier = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(earlier)
    queries = [PROMPT + "Answer: 34", PROMPT + "Answer: 35"]
    expected = load_openrlhf_file().reward_func(queries, [PROMPT] * 2, ["34", "34"])
    out = earlier.reward_func(queries, [PROMPT] * 2, ["34", "34"])
    assert out["rewards"].tolist() == expected["rewards"].tolist() == [1.0, -1.0]


def test_openrlhf_reward_func(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ADVBUDGET_REWARD_METHOD", raising=False)
    reward_func = load_openrlhf_file().reward_func
    queries = [
        PROMPT + R + "Answer: 34<|im_end|>",  # right, once the end-of-turn token is cut
        PROMPT + R + "Answer: 34.<|im_end|><|endoftext|>",  # wrong for DAPO
        PROMPT + R + "Answer: 34",  # right, truncated (no end token)
        PROMPT + R + "Answer: 34</s>",  # right, int label
        "a query that does not start with its prompt. Answer: 34",  # right
        PROMPT + R + "Answer: 34",  # label None: an error
        None,  # not a str: an error
        PROMPT + R + "Answer: 34",  # empty label: an error
    ]
    prompts = [PROMPT] * len(queries)
    labels = ["34", "34", "34", 34, "34", None, "34", ""]
    out = reward_func(queries, prompts, labels)
    assert set(out) == {"rewards", "scores", "extra_logs"}
    expected_scores = [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert out["scores"].tolist() == expected_scores
    assert out["rewards"].tolist() == [2 * s - 1 for s in expected_scores]
    assert out["extra_logs"]["accuracy"].tolist() == expected_scores
    assert out["extra_logs"]["reward_error"].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    for value in [out["rewards"], out["scores"], *out["extra_logs"].values()]:
        assert isinstance(value, torch.Tensor)
        assert value.dtype == torch.float32
        assert value.shape == (len(queries),)


def test_openrlhf_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_openrlhf_file()
    monkeypatch.setattr(module, "_errors_logged", 0)
    reward_func = module.reward_func
    out = reward_func(["Answer: 34", "Answer: 34"], None, None)
    assert out["rewards"].tolist() == [-1.0, -1.0]
    assert out["extra_logs"]["reward_error"].tolist() == [1.0, 1.0]
    # prompts missing or short: the whole query is graded
    assert reward_func(["Answer: 34", "Answer: 34"], [], ["34", "34"])["scores"].tolist() == [1, 1]
    assert reward_func(None, None, None)["rewards"].shape == (0,)
    assert reward_func([], [], [])["rewards"].shape == (0,)
    assert reward_func(["Answer: 34"], ["Answer: 34"], ["34"])["scores"].tolist() == [0.0]

    monkeypatch.setenv("ADVBUDGET_REWARD_METHOD", "sympy")
    out = reward_func(["Answer: 34"] * 3, [""] * 3, ["34"] * 3)
    assert out["rewards"].tolist() == [-1.0] * 3
    assert out["extra_logs"]["reward_error"].tolist() == [1.0] * 3
    monkeypatch.setenv("ADVBUDGET_REWARD_WRONG", "0")
    assert reward_func(["Answer: 34"], [""], ["34"])["rewards"].tolist() == [0.0]
    monkeypatch.setenv("ADVBUDGET_REWARD_METHOD", "dapo")
    monkeypatch.setenv("ADVBUDGET_REWARD_WRONG", "zero")
    assert reward_func(["Answer: 34"], [""], ["34"])["extra_logs"]["reward_error"].tolist() == [1.0]


def test_openrlhf_logs_the_first_errors(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    module = load_openrlhf_file()
    monkeypatch.setattr(module, "_errors_logged", 0)
    with caplog.at_level("WARNING", logger="advbudget.rewards.openrlhf"):
        module.reward_func(["Answer: 34"] * 12, [""] * 12, [None] * 12)
    messages = [r.getMessage() for r in caplog.records if r.name == "advbudget.rewards.openrlhf"]
    assert len(messages) == 10
    assert messages[0] == (
        "reward_func: sample 0 scored as wrong: TypeError: "
        "labels[0]: expected a str or an int, got NoneType None"
    )
    assert messages[-1].endswith("(no more will be logged)")


def test_openrlhf_options(monkeypatch: pytest.MonkeyPatch) -> None:
    reward_func = load_openrlhf_file().reward_func
    queries = [PROMPT + R + "Answer: 1/2<|im_end|>", PROMPT + R + "Answer: 3<|im_end|>"]
    labels = ["\\frac{1}{2}", "\\frac{1}{2}"]
    monkeypatch.setenv("ADVBUDGET_REWARD_METHOD", "math_verify")
    monkeypatch.setenv("ADVBUDGET_REWARD_CORRECT", "1")
    monkeypatch.setenv("ADVBUDGET_REWARD_WRONG", "0")
    out = reward_func(queries, [PROMPT, PROMPT], labels)
    assert out["rewards"].tolist() == [1.0, 0.0]
    monkeypatch.setenv("ADVBUDGET_REWARD_METHOD", "dapo")
    assert reward_func(queries, [PROMPT, PROMPT], labels)["rewards"].tolist() == [0.0, 0.0]


def test_openrlhf_overlong_penalty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ADVBUDGET_REWARD_METHOD", raising=False)
    reward_func = load_openrlhf_file().reward_func
    queries = ["Answer: 34", "Answer: 35", "Answer: 34"]
    out = reward_func(
        queries,
        [""] * 3,
        ["34"] * 3,
        response_lengths=[100, 4096, 3840],
        max_response_length=4096,
        overlong_buffer=512,
    )
    assert out["rewards"].tolist() == [1.0, -2.0, 0.5]
    assert out["scores"].tolist() == [1.0, 0.0, 1.0]
    assert out["extra_logs"]["overlong_penalty"].tolist() == [0.0, -1.0, -0.5]
    # Without token counts the penalty is not guessed: every sample is an error.
    out = reward_func(queries, [""] * 3, ["34"] * 3, max_response_length=4096, overlong_buffer=512)
    assert out["extra_logs"]["reward_error"].tolist() == [1.0] * 3
    out = reward_func(
        queries,
        [""] * 3,
        ["34"] * 3,
        response_lengths=[1, 2],
        max_response_length=4096,
        overlong_buffer=512,
    )
    assert out["extra_logs"]["reward_error"].tolist() == [1.0] * 3


def test_openrlhf_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # OpenRLHF calls reward_func through asyncio.to_thread, one sample at a time.
    monkeypatch.setenv("ADVBUDGET_REWARD_METHOD", "math_verify")
    reward_func = load_openrlhf_file().reward_func

    async def score_all() -> list[Any]:
        return await asyncio.gather(
            *(
                asyncio.to_thread(reward_func, [PROMPT + c.response], [PROMPT], [c.truth])
                for c in CASES
            )
        )

    outs = asyncio.run(score_all())
    assert [out["scores"].item() for out in outs] == [case.math_verify for case in CASES]
    assert sum(out["extra_logs"]["reward_error"].item() for out in outs) == 0


# --- Imports -----------------------------------------------------------------------------


def test_imports_no_framework() -> None:
    # A fresh interpreter: this one has imported torch for the tests above.
    code = f"""
import importlib.util, sys
import advbudget.rewards, advbudget.rewards.verl, advbudget.rewards.trl
spec = importlib.util.spec_from_file_location("reward_func", {str(OPENRLHF_REWARD_FILE)!r})
spec.loader.exec_module(importlib.util.module_from_spec(spec))
heavy = ["torch", "transformers", "math_verify", "sympy", "trl", "verl", "openrlhf", "jax", "vllm"]
print(sorted(name for name in heavy if name in sys.modules))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"


def test_public_api() -> None:
    assert sorted(rewards_package.__all__) == [
        "dapo_reward",
        "extract_answer",
        "is_correct",
        "math_verify_reward",
        "normalize_answer",
        "overlong_penalty",
    ]


# ----------------------------------------------------------------------------- linear time

# The regex OpenRLHF's wrapper used to run, quadratic on whitespace without an end token:
# the linear replacement must cut exactly what it cut.
_OLD_TRAILING_SPECIAL_TOKENS = re.compile(
    r"(?:\s*(?:<\|[^<>|\n]{1,64}\|>|<｜[^<>｜\n]{1,64}｜>|</s>|<eos>|<end_of_turn>))+\s*\Z"
)
_TRAILER_PIECES = [
    "<|im_end|>", "<|endoftext|>", "<|", "|>", "<", ">", "|", " ", "\n", "\t", "\xa0",
    "\u3000", "a", "</s>", "<eos>", "<end_of_turn>", "<｜end▁of▁sentence｜>", "｜", "<｜",
    "｜>", "s>", "<|" + "x" * 64 + "|>", "<|" + "x" * 65 + "|>", "<| a |>", "Answer: 34",
]  # fmt: skip


@given(st.lists(st.sampled_from(_TRAILER_PIECES), max_size=12))
def test_trailing_special_tokens_are_cut_as_the_old_regex_cut_them(pieces):
    from advbudget.adapters.openrlhf.rewards import _strip_trailing_special_tokens

    text = "".join(pieces)
    assert _strip_trailing_special_tokens(text) == _OLD_TRAILING_SPECIAL_TOKENS.sub("", text)


def test_trailing_special_tokens_on_long_degenerate_tails():
    from advbudget.adapters.openrlhf.rewards import _strip_trailing_special_tokens as strip

    assert strip("Answer: 34" + "\n" * 200_000) == "Answer: 34" + "\n" * 200_000  # no token
    assert strip("Answer: 34" + "<|im_end|>\n" * 50_000) == "Answer: 34"
    assert strip("Answer: 34 " + "<|im_end|>" * 50_000 + " " * 100_000) == "Answer: 34"


def test_math_verify_reads_the_last_max_response_chars(monkeypatch):
    pytest.importorskip("math_verify")
    from advbudget.rewards import _math_verify

    cap = _math_verify.MAX_RESPONSE_CHARS
    assert cap == 8192
    box = "\\boxed{34}"
    # At the boundary: a response of exactly the cap is read whole, one past it loses the
    # answer that lies before the last `cap` characters.
    assert math_verify_reward(box + "\n" * (cap - len(box)), "34") == 1.0
    assert math_verify_reward(box + "\n" * cap, "34") == 0.0
    assert math_verify_reward("\n" * 10 * cap + box, "34") == 1.0  # the tail is kept
    seen: list[str] = []
    real_parse = _math_verify._math_verify().parse

    def parse(text, **kwargs):
        seen.append(text)
        return real_parse(text, **kwargs)

    monkeypatch.setattr(_math_verify._math_verify(), "parse", parse)
    response = "x" * (3 * cap) + "Answer: 34"
    math_verify_reward(response, "34")
    assert response[-cap:] in seen
    assert response not in seen
    math_verify_reward(response[-cap:], "34")
    assert seen[-1] == response[-cap:]  # at most the cap: passed as it is
