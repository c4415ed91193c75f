"""DAPO's soft overlong punishment, from token counts."""

from __future__ import annotations

from ._checks import check_count, check_real


def overlong_penalty(length: int, max_length: int, buffer: int, factor: float = 1.0) -> float:
    """DAPO's length penalty: 0 up to ``max_length - buffer`` tokens, then a linear ramp.

    ``min(-(length - (max_length - buffer)) / buffer * factor, 0)``: it reaches
    ``-factor`` at ``max_length`` and is added to the answer's reward. Lengths are token
    counts of the response (never characters: the ramp is defined on the generation
    budget). Past ``max_length`` the ramp goes on, as in DAPO's code (generation normally
    stops there).

    Args:
        length: the response's length in tokens, ``>= 0``.
        max_length: the generation budget in tokens (DAPO: 20480).
        buffer: the soft zone before it, ``0 < buffer <= max_length`` (DAPO: 4096).
        factor: the penalty at ``max_length``, ``>= 0`` (DAPO: 1.0).

    Returns:
        The penalty, ``<= 0``.

    Raises:
        TypeError: a length is not an int, or ``factor`` not a number.
        ValueError: an argument is out of its range.

    References:
        DAPO, arXiv 2503.14476, Eq. 13 (soft overlong punishment).

    Examples:
        >>> from advbudget.rewards import overlong_penalty
        >>> overlong_penalty(3000, max_length=4096, buffer=512)
        0.0
        >>> overlong_penalty(3840, max_length=4096, buffer=512)
        -0.5
        >>> overlong_penalty(4096, max_length=4096, buffer=512, factor=0.5)
        -0.5
    """
    length = check_count(length, "length")
    max_length = check_count(max_length, "max_length")
    buffer = check_count(buffer, "buffer")
    factor = check_real(factor, "factor")
    if length < 0:
        raise ValueError(f"length: expected a token count >= 0, got {length}")
    if buffer <= 0:
        raise ValueError(f"buffer: expected a token count > 0, got {buffer}")
    if buffer > max_length:
        raise ValueError(f"buffer: expected at most max_length = {max_length} tokens, got {buffer}")
    if factor < 0:
        raise ValueError(f"factor: expected a number >= 0, got {factor}")
    penalty = -(length - (max_length - buffer)) / buffer * factor
    # `min(penalty, 0)` would return -0.0 at the threshold.
    return penalty if penalty < 0 else 0.0
