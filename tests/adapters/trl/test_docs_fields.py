"""Every ``name=value`` setting the TRL pages name is a real ``GRPOConfig`` field, an
``AdvBudgetGRPOTrainer`` argument or an estimator option (``advantage_options``)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

trl = pytest.importorskip("trl")

from advbudget.adapters import get_convention  # noqa: E402
from advbudget.adapters.trl import AdvBudgetGRPOTrainer  # noqa: E402

from .conftest import TRL_WARNINGS  # noqa: E402

pytestmark = TRL_WARNINGS

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "docs" / "guides" / "trl.md", ROOT / "docs" / "lm.md"]
SETTING = re.compile(r"`([a-z_][a-z0-9_]*)=[^`]*`")


def test_every_setting_named_in_the_trl_pages_is_real() -> None:
    from trl import GRPOConfig

    known = {field.name for field in dataclasses.fields(GRPOConfig)}
    known |= set(inspect.signature(AdvBudgetGRPOTrainer.__init__).parameters)
    known |= set(inspect.signature(trl.GRPOTrainer.__init__).parameters)
    known |= set(get_convention("trl").option_names())
    named: dict[str, set[str]] = {}
    for page in PAGES:
        for name in SETTING.findall(page.read_text(encoding="utf-8")):
            named.setdefault(name, set()).add(page.name)
    assert "loss_type" in named  # the pages were read
    unknown = {name: sorted(pages) for name, pages in named.items() if name not in known}
    assert not unknown, f"not a TRL setting nor an adapter argument: {unknown}"
