"""The documentation: the site builds in strict mode, its examples run, its figures draw."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import advbudget

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

# Pages whose python blocks are tutorials and must run as written (the framework guides
# show planned interfaces and trainer code, and are not run).
RUNNABLE_PAGES = ("index.md", "getting-started.md", "method.md", "multi-turn.md", "async.md")
BLOCK = re.compile(r"^(?P<indent>[ ]*)```python[^\n]*\n(?P<code>.*?)^(?P=indent)```", re.M | re.S)
OPTIONAL_BACKENDS = ("torch", "jax")

# Public objects each API page must document: (module, page).
API_PAGES = {
    "advbudget": "core",
    "advbudget.metrics": "metrics",
    "advbudget.theory": "theory",
    "advbudget.lab.data": "lab/data",
    "advbudget.rewards": "rewards",
    "advbudget.adapters.verl.rewards": "rewards",
    "advbudget.adapters.trl.rewards": "rewards",
    "advbudget.adapters.openrlhf.rewards": "rewards",
    "advbudget.lab.eval": "lab/eval",
    "advbudget.lab.tiny": "lab/tiny",
}


def _public_functions_and_classes(module_name: str) -> list[str]:
    """``__all__`` where the module has one, else its own public functions and classes."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and callable(value)
            and getattr(value, "__module__", None) == module_name
        ]
    # Constants without a docstring are documented only where the page shows them.
    return [name for name in names if name != "__version__" and not name.isupper()]


def _documented(html: str, module_name: str, name: str) -> bool:
    """Whether the page documents ``module_name.name``, under that path or under the module
    it lives in (``advbudget.lab.data.write_verl`` is ``advbudget.adapters.verl.data``'s)."""
    home = getattr(getattr(importlib.import_module(module_name), name), "__module__", None)
    return any(f'id="{path}.{name}"' in html for path in (module_name, home) if path)


def _code_blocks() -> list[pytest.param]:
    params = []
    for page in RUNNABLE_PAGES:
        text = (DOCS / page).read_text(encoding="utf-8")
        for number, match in enumerate(BLOCK.finditer(text)):
            code = textwrap.dedent(match["code"])
            params.append(pytest.param(page, code, id=f"{page}:{number}"))
    return params


@pytest.mark.parametrize(("page", "code"), _code_blocks())
def test_docs_examples_run(page: str, code: str) -> None:
    """Every python block of the tutorial pages runs as written."""
    for backend in OPTIONAL_BACKENDS:
        needed = re.search(rf"^\s*(import|from) {backend}\b", code, re.M)
        if needed:  # a skip, or a failure where ADVBUDGET_REQUIRE names it
            pytest.importorskip(backend)
    exec(compile(code, f"docs/{page}", "exec"), {})


def test_make_figures_writes_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    result = subprocess.run(
        [sys.executable, str(DOCS / "scripts" / "make_figures.py"), "--output-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    written = sorted(path.name for path in tmp_path.iterdir())
    assert written == [
        "advantages.png", "objective.png", "sim-compare.png", "sim-map.png", "slopes.png"
    ]  # fmt: skip
    for name in written:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        assert 10_000 < len(data) < 500_000, f"{name}: {len(data)} bytes"
    # The committed figures are the ones the docs show.
    for name in written:
        assert (DOCS / "figures" / name).is_file(), f"docs/figures/{name}: run the script"


def test_docs_pages_exist() -> None:
    """Every page the nav of mkdocs.yml names is there (docs/simulation.md included)."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config.split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    pages = re.findall(r":\s*(\S+\.md)\s*$", nav, re.M)
    assert "simulation.md" in pages
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert not missing, f"pages in the nav of mkdocs.yml but not in docs/: {missing}"


@pytest.mark.slow
def test_site_builds_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict`` passes and the API pages document the public API."""
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason=f"{module} is not installed (docs tooling)")
    site = tmp_path / "site"
    result = subprocess.run(
        # From another directory: every path in mkdocs.yml is the config file's, not cwd's.
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # mkdocs-material's banner
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-6000:]}"

    for module, page in API_PAGES.items():
        html = (site / "api" / page / "index.html").read_text(encoding="utf-8")
        names = _public_functions_and_classes(module)
        assert names, module
        missing = [name for name in names if not _documented(html, module, name)]
        assert not missing, f"api/{page}: {module} objects not documented: {missing}"
    core = (site / "api" / "core" / "index.html").read_text(encoding="utf-8")
    missing = [name for name in advbudget.__all__ if f'id="advbudget.{name}"' not in core]
    assert not missing, f"api/core: not documented: {missing}"
    assert "budget_advantage" in core

    # The tutorial pages, the math and the figures made it into the site.
    method = (site / "method" / "index.html").read_text(encoding="utf-8")
    assert method.count("<math ") >= 50
    # Offline: every formula is MathML (no raw TeX for a script to typeset), and no page
    # loads anything from the network (no CDN script, no web font).
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r'class="arithmatex[^"]*">\s*\\[(\[]', text), page
        assert not re.search(r'<(script|link|img)[^>]+(src|href)="https?://', text), page
    for name in ("advantages.png", "slopes.png", "objective.png"):
        assert f"figures/{name}" in method
        assert (site / "figures" / name).is_file()
    benchmarks = (site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    assert "--8&lt;--" not in benchmarks
    assert "floor: hand-written reshape budget" in benchmarks
    for guide in ("verl", "trl", "openrlhf"):
        text = (site / "guides" / guide / "index.html").read_text(encoding="utf-8")
        assert f"advbudget.adapters.{guide}" in text
        assert "in development" not in text
    # Sphinx roles in the docstrings were turned into links or code, never shown raw.
    for page in sorted(set(API_PAGES.values())):
        html = (site / "api" / page / "index.html").read_text(encoding="utf-8")
        assert not re.search(r":(func|class|meth|attr|mod|data):<code>", html), page
        assert "<autoref" not in html, page


def _mathml_hook() -> Any:
    spec = importlib.util.spec_from_file_location("mathml", DOCS / "scripts" / "mathml.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_math_becomes_mathml_or_fails_the_build() -> None:
    pytest.importorskip("latex2mathml")
    hook = _mathml_hook()
    display = hook.typeset(r"A_i = B\left(\frac{1}{k} - \frac{1}{G}\right)", display=True)
    assert display.startswith('<div class="arithmatex arithmatex-display"><math ')
    assert display.count("<mfrac>") == 2
    assert 'display="block"' in display
    inline = hook.typeset(r"\kappa_{\text{eff}}", display=False)
    assert inline.startswith('<span class="arithmatex"><math ')
    assert "&#x003BA;" in inline  # κ
    with pytest.raises(ValueError, match=r"foobar"):
        hook.typeset(r"\foobar x", display=False)  # a command latex2mathml does not know

    class Page:
        class file:
            src_path = "method.md"

    page_html = '<p>with <span class="arithmatex">\\(k &lt; G\\)</span></p>'
    out = hook.on_page_content(page_html, page=Page)
    assert "<math " in out
    assert "<mo>&#x0003C;</mo>" in out  # the page's &lt; was read as the TeX's <
    assert "\\(" not in out
