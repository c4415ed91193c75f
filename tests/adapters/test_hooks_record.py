"""The hooks check itself (framework-free): it fails, naming the symbol, when a recorded
symbol moves, changes its signature or stops setting its attribute."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from advbudget.adapters._hooks import Hook, hook_problems, private_names_outside

DUMPS = str(inspect.signature(json.dumps))
ENCODER_INIT = str(inspect.signature(json.JSONEncoder.__init__))


def test_recorded_symbols_pass() -> None:
    hooks = [
        Hook("json", "dumps", DUMPS, "json/__init__.py:183", "call"),
        Hook(
            "json",
            "JSONEncoder.__init__",
            ENCODER_INIT,
            "json/encoder.py:105",
            "read",
            attribute="skipkeys",
        ),
        Hook("json", "JSONEncoder", None, "json/encoder.py:73", "subclass"),
        Hook("json", "dumps", ("(obj)", DUMPS), "json/__init__.py:183", "call"),
    ]
    assert hook_problems(hooks) == []


@pytest.mark.parametrize(
    ("hook", "problem"),
    [
        (
            Hook("json", "dumps", "(obj)", "x", "call"),
            "json:dumps: signature changed: recorded (obj), found (obj, *",
        ),
        (Hook("json", "dump_s", None, "x", "call"), "json:dump_s: not found (AttributeError"),
        (
            Hook("json.nowhere", "dumps", None, "x", "call"),
            "json.nowhere:dumps: not found (ModuleNotFoundError",
        ),
        (
            Hook("json", "JSONEncoder.__init__", ENCODER_INIT, "x", "read", attribute="_cache"),
            "json:JSONEncoder.__init__ (self._cache): no longer sets self._cache",
        ),
    ],
)
def test_a_moved_symbol_is_named(hook: Hook, problem: str) -> None:
    problems = hook_problems([Hook("json", "dumps", DUMPS, "x", "call"), hook])
    assert len(problems) == 1, problems
    assert problems[0].startswith(problem), problems


def test_use_is_checked() -> None:
    with pytest.raises(ValueError, match=r"use: expected one of wrap, .* got 'patch'"):
        Hook("json", "dumps", None, "x", "patch")


def test_private_names_outside_hooks_are_found(tmp_path: Path) -> None:
    hooks = [Hook("json", "JSONEncoder.__init__", None, "x", "read", attribute="_cache")]
    clean, leak = tmp_path / "clean.py", tmp_path / "leak.py"
    clean.write_text("x = encoder.cache  # _cache only in a comment\nmy_cache = 1\n")
    leak.write_text("a = 1\nvalue = encoder._cache[0]\n")
    assert private_names_outside(hooks, [clean, leak]) == [f"{leak}:2: _cache"]


def test_rays_tracing_keyword_is_not_the_frameworks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray sets ``__signature__`` with ``_ray_trace_ctx`` on the methods of a class it makes
    an actor: the recorded signature still matches; any other change still fails."""
    import textwrap

    traced = inspect.signature(textwrap.dedent)
    traced = traced.replace(
        parameters=[
            *traced.parameters.values(),
            inspect.Parameter("_ray_trace_ctx", inspect.Parameter.KEYWORD_ONLY, default=None),
        ]
    )
    monkeypatch.setattr(textwrap.dedent, "__signature__", traced, raising=False)
    assert hook_problems([Hook("textwrap", "dedent", "(text)", "x", "call")]) == []
    problems = hook_problems([Hook("textwrap", "dedent", "(text, width)", "x", "call")])
    assert problems == ["textwrap:dedent: signature changed: recorded (text, width), found (text)"]
