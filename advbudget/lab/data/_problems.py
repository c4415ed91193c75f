"""One math problem with its ground truth, and DAPO's prompt template around it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from advbudget.adapters._datafiles import DAPO_DATA_SOURCE

DEFAULT_SOURCE = "BytedTsinghua-SIA/DAPO-Math-17k"
DAPO_ABILITY = "MATH"

DAPO_PROMPT_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be "
    "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem."
    "\n\n"
)
DAPO_PROMPT_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

Message = dict[str, str]


class DataError(ValueError):
    """A data file or dataset that cannot be read as math problems.

    The message names the file (or hub id), the row or line, what was expected and what
    was found.

    Examples:
        >>> from advbudget.lab.data import DataError
        >>> issubclass(DataError, ValueError)
        True
    """


@dataclass(frozen=True)
class Problem:
    """One math problem: its text, its ground-truth answer and the chat prompt to train on.

    Attributes:
        problem: the bare problem text, without any instruction template.
        answer: the ground truth as a string (DAPO's convention: ``"540"``, ``"-3"``).
        prompt_messages: the chat messages a policy sees, ``[{"role": "user", "content":
            ...}]``: the source's own messages when it has them, else the DAPO template
            around ``problem`` (:func:`dapo_prompt`).
        index: the source's id (DAPO's ``extra_info.index``, as a string), or, when the
            source has none, ``"text-"`` and a hash of the normalised prompt text, so
            repeats of one prompt share one index.
        data_source: the source's ``data_source`` (``"math_dapo"`` when it has none).
        ability: the source's ``ability`` (``"MATH"`` when it has none).

    Examples:
        >>> from advbudget.lab.data import Problem
        >>> item = Problem.from_text("What is $2 + 3$?", 5)
        >>> item.answer, item.index
        ('5', 'text-ced1466af7149839')
        >>> item.prompt_messages[0]["content"].splitlines()[2]
        'What is $2 + 3$?'
    """

    problem: str
    answer: str
    prompt_messages: list[Message]
    index: str
    data_source: str = DAPO_DATA_SOURCE
    ability: str = DAPO_ABILITY

    @classmethod
    def from_text(
        cls,
        problem: str,
        answer: str | int,
        *,
        index: str | None = None,
        data_source: str = DAPO_DATA_SOURCE,
    ) -> Problem:
        """A problem from its bare text and answer, prompted with the DAPO template.

        Examples:
            >>> from advbudget.lab.data import Problem
            >>> Problem.from_text("Compute $6 \\\\times 7$.", "42", index="p1").index
            'p1'
        """
        if not isinstance(problem, str) or not problem.strip():
            raise ValueError(f"problem: expected a non-empty string, got {problem!r}")
        if isinstance(answer, bool) or not isinstance(answer, (str, int)):
            raise ValueError(f"answer: expected a string or an int, got {answer!r}")
        if not str(answer).strip():
            raise ValueError(f"answer: expected a non-empty string, got {answer!r}")
        messages = [{"role": "user", "content": dapo_prompt(problem)}]
        return cls(
            problem=problem,
            answer=str(answer),
            prompt_messages=messages,
            index=index if index is not None else text_index(messages),
            data_source=data_source,
        )


def dapo_prompt(problem: str) -> str:
    """DAPO's user message around a problem: the instruction, the problem, the reminder.

    This is the exact template of DAPO-Math-17K's ``prompt`` column; DAPO's reward reads
    the last ``Answer: ...`` line that it asks for.

    Examples:
        >>> from advbudget.lab.data import dapo_prompt
        >>> print(dapo_prompt("What is $1 + 1$?"))
        Solve the following math problem step by step. The last line of your response should
        be of the form Answer: $Answer (without quotes) where $Answer is the answer to the
        problem.
        <BLANKLINE>
        What is $1 + 1$?
        <BLANKLINE>
        Remember to put your answer on its own line after "Answer:".
    """
    return DAPO_PROMPT_PREFIX + problem + DAPO_PROMPT_SUFFIX


def extract_problem(prompt: str) -> str:
    """The bare problem inside a DAPO prompt; any other text comes back unchanged.

    Strips the template's fixed prefix and suffix only when both are there, so
    ``extract_problem(dapo_prompt(p)) == p`` for every ``p``.

    Examples:
        >>> from advbudget.lab.data import dapo_prompt, extract_problem
        >>> extract_problem(dapo_prompt("Find $x$ if $x + 2 = 0$."))
        'Find $x$ if $x + 2 = 0$.'
        >>> extract_problem("Find $x$ if $x + 2 = 0$.")
        'Find $x$ if $x + 2 = 0$.'
    """
    if (
        prompt.startswith(DAPO_PROMPT_PREFIX)
        and prompt.endswith(DAPO_PROMPT_SUFFIX)
        and len(prompt) >= len(DAPO_PROMPT_PREFIX) + len(DAPO_PROMPT_SUFFIX)
    ):
        return prompt[len(DAPO_PROMPT_PREFIX) : len(prompt) - len(DAPO_PROMPT_SUFFIX)]
    return prompt


def text_index(messages: list[Message]) -> str:
    """The index of a prompt that has no id of its own: a hash of its normalised text.

    Whitespace runs count as one space, so copies that differ only in spacing share it.

    Examples:
        >>> from advbudget.lab.data._problems import text_index
        >>> text_index([{"role": "user", "content": "a  b"}]) == text_index(
        ...     [{"role": "user", "content": " a b\\n"}]
        ... )
        True
    """
    text = "\n".join(f"{m['role']}: {' '.join(m['content'].split())}" for m in messages)
    digest = hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()
    return "text-" + digest[:16]
