# The two commands a new machine needs: `make test` and `make demo`. Each creates the
# virtual environment it runs in. torch comes first from its CPU pin: an open torch
# requirement would make pip fetch a multi-GB CUDA build.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_PIN ?= torch==2.13.0
# Where the CPU wheel of TORCH_PIN comes from. Empty: pip's configured index (these machines
# serve the CPU wheel locally). Elsewhere: make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
STAMP := $(VENV)/.installed

.PHONY: test demo bench lint typecheck clean test-core test-verl test-trl test-openrlhf test-tunix bench-verl bench-trl bench-openrlhf bench-tunix bench-rewards

# $(call install_torch,DIR): torch from its pin, before anything that depends on it.
define install_torch
	$(1)/bin/python -m pip install --quiet "$(TORCH_PIN)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
endef

# $(call require_cpu_torch,DIR): fail, rather than test on a CUDA build pip fetched silently
# (a dependency asking for another torch would replace the pinned one). ALLOW_CUDA_TORCH=1
# accepts one on purpose.
define require_cpu_torch
	$(1)/bin/python -c "import os, sys, torch; cuda = torch.version.cuda; \
	  sys.exit(f'$(1): torch {torch.__version__} is a CUDA {cuda} build; make test wants the CPU wheel: ' \
	  'set TORCH_INDEX=https://download.pytorch.org/whl/cpu, or ALLOW_CUDA_TORCH=1') \
	  if cuda and not os.environ.get('ALLOW_CUDA_TORCH') else None"
endef

# $(call environment,DIR,EXTRAS[,PINS]): a virtual environment with torch from its pin first,
# then advbudget (editable) with EXTRAS, the test runner and PINS (requirements resolved with
# them, e.g. an older framework version).
define environment
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(call install_torch,$(1))
	$(1)/bin/python -m pip install --quiet -e ".[$(2)]" pytest hypothesis $(3)
	$(call require_cpu_torch,$(1))
	touch $(1)/.installed
endef

$(STAMP): pyproject.toml
	$(call environment,$(VENV),test)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck test-core test-verl test-trl test-openrlhf test-tunix

test-core: $(STAMP)
	ADVBUDGET_REQUIRE_BACKENDS=1 $(BIN)/python -m pytest -n 2

# Each trainer gets its own environment, as its users install it: verl, TRL and OpenRLHF
# pin conflicting versions (ray, transformers, antlr).
VENV_VERL ?= .venv-verl
# Each trainer's environment also gets the example estimator plugin (tests/plugin): an
# advbudget.estimators entry point must reach the trainer by name.
PLUGIN := tests/plugin

$(VENV_VERL)/.installed: pyproject.toml $(PLUGIN)/pyproject.toml
	$(call environment,$(VENV_VERL),verl)
	$(VENV_VERL)/bin/python -m pip install --quiet --no-deps ./$(PLUGIN)

test-verl: $(VENV_VERL)/.installed
	$(VENV_VERL)/bin/python -m pytest -q -p no:cacheprovider tests/adapters/verl advbudget/adapters/verl

bench-verl: $(VENV_VERL)/.installed
	$(VENV_VERL)/bin/python benchmarks/verl_adapter.py

# The TRL adapter supports trl>=1.13,<1.17 (pyproject's trl extra): its suite runs on the
# newest (.venv-trl, what pip picks) and the oldest (.venv-trl-oldest, 1.13: what Unsloth's
# trl<=1.15 pin allows too) of that range.
VENV_TRL ?= .venv-trl
VENV_TRL_OLDEST ?= .venv-trl-oldest
TRL_OLDEST_PIN ?= trl==1.13.*
$(VENV_TRL)/.installed: pyproject.toml $(PLUGIN)/pyproject.toml
	$(call environment,$(VENV_TRL),lm)
	$(VENV_TRL)/bin/python -m pip install --quiet --no-deps ./$(PLUGIN)

$(VENV_TRL_OLDEST)/.installed: pyproject.toml $(PLUGIN)/pyproject.toml
	$(call environment,$(VENV_TRL_OLDEST),lm,"$(TRL_OLDEST_PIN)")
	$(VENV_TRL_OLDEST)/bin/python -m pip install --quiet --no-deps ./$(PLUGIN)

TRL_SUITE := tests/adapters/trl advbudget/adapters/trl
test-trl: $(VENV_TRL)/.installed $(VENV_TRL_OLDEST)/.installed
	$(VENV_TRL)/bin/python -m pytest -q -p no:cacheprovider $(TRL_SUITE)
	$(VENV_TRL_OLDEST)/bin/python -m pytest -q -p no:cacheprovider $(TRL_SUITE)

bench-trl: $(VENV_TRL)/.installed
	$(VENV_TRL)/bin/python benchmarks/trl_adapter.py

# OpenRLHF pins flash-attn, which does not build without CUDA: the CPU environment installs
# OpenRLHF --no-deps and its other requirements by hand (GPU users: pip install
# "advbudget[openrlhf]"); the tests put import stubs for flash_attn and vllm on the path.
VENV_OPENRLHF ?= .venv-openrlhf
$(VENV_OPENRLHF)/.installed: pyproject.toml $(PLUGIN)/pyproject.toml
	$(PYTHON) -m venv $(VENV_OPENRLHF)
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet --upgrade pip
	$(call install_torch,$(VENV_OPENRLHF))
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet --no-deps openrlhf==0.11.2
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet "ray[default]==2.55.0" transformers==5.15.0 \
	  peft pylatexenc aiohttp torchdata pillow datasets accelerate
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet --no-build-isolation deepspeed==0.19.6
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet -e ".[data,rewards]" pytest hypothesis
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet --no-deps ./$(PLUGIN)
	$(call require_cpu_torch,$(VENV_OPENRLHF))
	touch $@

test-openrlhf: $(VENV_OPENRLHF)/.installed
	$(VENV_OPENRLHF)/bin/python -m pytest -q -p no:cacheprovider tests/adapters/openrlhf advbudget/adapters/openrlhf

bench-openrlhf: $(VENV_OPENRLHF)/.installed
	$(VENV_OPENRLHF)/bin/python benchmarks/openrlhf_adapter.py

# tunix is JAX-only: no torch to pin (its environment would not use one), jax on CPU.
VENV_TUNIX ?= .venv-tunix
$(VENV_TUNIX)/.installed: pyproject.toml $(PLUGIN)/pyproject.toml
	$(PYTHON) -m venv $(VENV_TUNIX)
	$(VENV_TUNIX)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_TUNIX)/bin/python -m pip install --quiet -e ".[tunix]" pytest hypothesis
	$(VENV_TUNIX)/bin/python -m pip install --quiet --no-deps ./$(PLUGIN)
	$(VENV_TUNIX)/bin/python -c "import importlib.util, sys; \
	  sys.exit('$(VENV_TUNIX): torch got installed; the tunix environment should have none') \
	  if importlib.util.find_spec('torch') else None"
	touch $@

test-tunix: $(VENV_TUNIX)/.installed
	$(VENV_TUNIX)/bin/python -m pytest -q -p no:cacheprovider tests/adapters/tunix advbudget/adapters/tunix

bench-tunix: $(VENV_TUNIX)/.installed
	$(VENV_TUNIX)/bin/python benchmarks/tunix_adapter.py

# The demo needs numpy and matplotlib only (the lab is numpy): its own small environment,
# no torch, no test stack.
VENV_DEMO ?= .venv-demo
$(VENV_DEMO)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV_DEMO)
	$(VENV_DEMO)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_DEMO)/bin/python -m pip install --quiet -e ".[plot]"
	touch $@

demo: $(VENV_DEMO)/.installed
	$(VENV_DEMO)/bin/advbudget explain --group-size 8 --plot demo/explain.png
	$(VENV_DEMO)/bin/advbudget simulate --experiment compare --regime both \
	  --estimators grpo,dr,budget --seeds 4 --workers 2

bench-rewards: $(STAMP)
	$(BIN)/python benchmarks/rewards_complexity.py

# Every benchmark whose environment exists (make test builds them), then RESULTS.md.
bench: $(STAMP)
	$(BIN)/python benchmarks/core.py
	$(BIN)/python benchmarks/estimators.py
	$(MAKE) bench-rewards
	if [ -x $(VENV_VERL)/bin/python ]; then $(MAKE) bench-verl; fi
	if [ -x $(VENV_TRL)/bin/python ]; then $(MAKE) bench-trl; fi
	if [ -x $(VENV_OPENRLHF)/bin/python ]; then $(MAKE) bench-openrlhf; fi
	if [ -x $(VENV_TUNIX)/bin/python ]; then $(MAKE) bench-tunix; fi
	$(BIN)/python benchmarks/report.py

clean:
	rm -rf $(VENV) $(VENV_DEMO) $(VENV_VERL) $(VENV_TRL) $(VENV_TRL_OLDEST) $(VENV_OPENRLHF) $(VENV_TUNIX) .pytest_cache .mypy_cache .ruff_cache demo
