"""Shared pieces of the tunix adapter tests (real tunix 0.1.7, jax on CPU)."""

from __future__ import annotations

import pytest

# tunix and its stack (flax, orbax, grain) warn at import and on CPU about optional parts.
TUNIX_WARNINGS = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning"
)
