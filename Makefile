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
# Each environment installs under pip constraints: the versions `make test` was last
# green with (constraints/NAME.txt, written by `make lock` and committed), on the Python
# they were locked with (CI's). Empty: no constraints, what the registry serves today
# (`make test-latest`, and any other Python, whose wheels may differ).
LOCK_PYTHON := 3.11
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print(*sys.version_info[:2], sep=".")')
CONSTRAINTS ?= $(if $(filter $(LOCK_PYTHON),$(PYTHON_VERSION)),constraints)
ifneq ($(PYTHON_VERSION),$(LOCK_PYTHON))
  $(info Python $(PYTHON_VERSION): constraints/ are locked on $(LOCK_PYTHON); installing without them)
endif

.PHONY: test environments test-latest lock lock-latest demo bench lint typecheck clean test-core test-verl test-trl test-openrlhf test-tunix test-skyrl bench-verl bench-skyrl bench-trl bench-openrlhf bench-tunix bench-rewards

# $(call constrain,NAME): pip's option for the constraints of environment NAME (none when
# CONSTRAINTS is empty); $(call constraints_file,NAME): the file, a prerequisite of its
# environment (so that a new lock rebuilds it).
constrain = $(if $(CONSTRAINTS),-c $(CONSTRAINTS)/$(1).txt)
constraints_file = $(if $(CONSTRAINTS),$(CONSTRAINTS)/$(1).txt)

# $(call install_torch,DIR,NAME): torch from its pin, before anything that depends on it.
define install_torch
	$(1)/bin/python -m pip install --quiet "$(TORCH_PIN)" $(call constrain,$(2)) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
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

# $(call environment,DIR,NAME,EXTRAS[,PINS]): a virtual environment with torch from its pin
# first, then advbudget (editable) with EXTRAS, the test runner and PINS (requirements
# resolved with them, e.g. an older framework version), under NAME's constraints.
define environment
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(call install_torch,$(1),$(2))
	$(1)/bin/python -m pip install --quiet -e ".[$(3)]" pytest hypothesis $(4) $(call constrain,$(2))
	$(call require_cpu_torch,$(1))
	touch $(1)/.installed
endef

# $(call upstream,DIR,TRAINER,PATHS): the trainer's own tests, shipped in its wheel
# (site-packages/tests), run from there twice by tests/upstream/advbudget_upstream.py:
# stock (noting which tests reach its estimators), then with advbudget's mirrors swapped in
# (each of those tests must reach a mirror, and pass).
define upstream
	cd "$$($(1)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" && \
	for swap in "" --upstream-swap; do \
	  PYTHONPATH="$(CURDIR)/tests/upstream" "$(abspath $(1))/bin/python" -m pytest -q \
	    -c "$(CURDIR)/tests/upstream/pytest.ini" --rootdir=. --upstream=$(2) \
	    --upstream-reached="$(abspath $(1))/upstream-reached.json" $$swap $(3) || exit 1; \
	done
endef

$(STAMP): pyproject.toml $(call constraints_file,core)
	$(call environment,$(VENV),core,test)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# Every environment first, three at a time (pip mostly waits on downloads and the disk: on 2
# cores this builds them in about half the time of one after another); then ruff, mypy and
# the core suite (pytest -n 2: both cores); then the trainer suites two at a time, longest
# first. A trainer suite leaves a core idle much of its time (its subprocesses start Ray,
# torchrun and models one after another): on 2 cores verl's beside OpenRLHF's took 11 min,
# one after the other 21. -O prints each suite's output whole, when it ends.
TRAINER_SUITES := test-verl test-openrlhf test-trl test-tunix test-skyrl
test:
	$(MAKE) -j3 environments
	$(MAKE) lint typecheck test-core
	$(MAKE) -j2 --output-sync=target $(TRAINER_SUITES)

# The same environments and suites with what the registry serves today, in .venv-latest*:
# what a new release of a dependency breaks, before a user meets it.
LATEST_ENVS := CONSTRAINTS= VENV=.venv-latest VENV_VERL=.venv-latest-verl \
  VENV_TRL=.venv-latest-trl VENV_TRL_OLDEST=.venv-latest-trl-oldest \
  VENV_OPENRLHF=.venv-latest-openrlhf VENV_TUNIX=.venv-latest-tunix VENV_SKYRL=.venv-latest-skyrl
test-latest:
	$(MAKE) test $(LATEST_ENVS)

# constraints/NAME.txt from each environment of `make test` as it stands (run after a green
# `make test`; `make lock-latest` takes the .venv-latest* ones after a green test-latest):
# every installed version but advbudget's own packages and torch (TORCH_PIN decides it).
LOCK_DIR ?= constraints
LOCKED = core:$(VENV) verl:$(VENV_VERL) trl:$(VENV_TRL) trl-oldest:$(VENV_TRL_OLDEST) \
  openrlhf:$(VENV_OPENRLHF) tunix:$(VENV_TUNIX) skyrl:$(VENV_SKYRL)
lock:
	@mkdir -p $(LOCK_DIR)
	@for pair in $(LOCKED); do \
	  name=$${pair%%:*}; venv=$${pair#*:}; \
	  test -x $$venv/bin/python || { echo "lock: $$venv is missing: run make test first" >&2; exit 1; }; \
	  { echo "# make test's $$name environment: the versions it was last green with"; \
	    echo "# (make lock, $$(date -u +%F), $$($$venv/bin/python -c 'import platform as p; print("Python", p.python_version(), p.system(), p.machine())'))."; \
	    echo "# make test-latest builds without it."; \
	    $$venv/bin/python -m pip freeze --exclude-editable | grep -v -e ' @ ' -e '^torch=='; \
	  } > $(LOCK_DIR)/$$name.txt; \
	  echo "$(LOCK_DIR)/$$name.txt: $$venv"; \
	done

lock-latest:
	$(MAKE) lock $(LATEST_ENVS)

# The array backends are required there: a test skipped for want of one fails instead
# (advbudget/testing/_required.py), as in the trainer suites below.
test-core: $(STAMP)
	ADVBUDGET_REQUIRE=numpy,array_api_strict,torch,jax $(BIN)/python -m pytest -n 2

# Each trainer gets its own environment, as its users install it: verl, TRL and OpenRLHF
# pin conflicting versions (ray, transformers, antlr).
VENV_VERL ?= .venv-verl
# Each trainer's environment also gets the example estimator plugin (tests/plugin): an
# advbudget.estimators entry point must reach the trainer by name.
PLUGIN := tests/plugin
# What each trainer suite's environment is built with: a test skipped for want of one of
# these fails instead (advbudget/testing/_required.py), so a broken install stops the suite.
# ADVBUDGET_FRAMEWORK picks the framework the shared adapter suite (tests/adapters/contract)
# checks there.
REQUIRE_VERL := ADVBUDGET_FRAMEWORK=verl \
  ADVBUDGET_REQUIRE=verl,transfer_queue,ray,torch,advbudget_example_plugin
REQUIRE_TRL := ADVBUDGET_FRAMEWORK=trl \
  ADVBUDGET_REQUIRE=trl,transformers,torch,advbudget_example_plugin
REQUIRE_OPENRLHF := ADVBUDGET_FRAMEWORK=openrlhf \
  ADVBUDGET_REQUIRE=openrlhf,ray,deepspeed,torch,advbudget_example_plugin
REQUIRE_TUNIX := ADVBUDGET_FRAMEWORK=tunix ADVBUDGET_REQUIRE=tunix,jax,advbudget_example_plugin
CONTRACT := tests/adapters/contract

$(VENV_VERL)/.installed: pyproject.toml $(PLUGIN)/pyproject.toml $(call constraints_file,verl)
	$(call environment,$(VENV_VERL),verl,verl)
	$(VENV_VERL)/bin/python -m pip install --quiet --no-deps ./$(PLUGIN)

test-verl: $(VENV_VERL)/.installed
	$(REQUIRE_VERL) $(VENV_VERL)/bin/python -m pytest -q -p no:cacheprovider tests/adapters/verl \
	  $(CONTRACT) advbudget/adapters/verl
	$(call upstream,$(VENV_VERL),verl,tests/trainer)

bench-verl: $(VENV_VERL)/.installed
	$(VENV_VERL)/bin/python benchmarks/verl_adapter.py

# The TRL adapter supports trl>=1.13,<1.17 (pyproject's trl extra): its suite runs on the
# newest (.venv-trl, what pip picks) and the oldest (.venv-trl-oldest, 1.13: what Unsloth's
# trl<=1.15 pin allows too) of that range.
VENV_TRL ?= .venv-trl
VENV_TRL_OLDEST ?= .venv-trl-oldest
TRL_OLDEST_PIN ?= trl==1.13.*
$(VENV_TRL)/.installed: pyproject.toml $(PLUGIN)/pyproject.toml $(call constraints_file,trl)
	$(call environment,$(VENV_TRL),trl,lm)
	$(VENV_TRL)/bin/python -m pip install --quiet --no-deps ./$(PLUGIN)

$(VENV_TRL_OLDEST)/.installed: pyproject.toml $(PLUGIN)/pyproject.toml \
    $(call constraints_file,trl-oldest)
	$(call environment,$(VENV_TRL_OLDEST),trl-oldest,lm,"$(TRL_OLDEST_PIN)")
	$(VENV_TRL_OLDEST)/bin/python -m pip install --quiet --no-deps ./$(PLUGIN)

TRL_SUITE := tests/adapters/trl $(CONTRACT) advbudget/adapters/trl
test-trl: $(VENV_TRL)/.installed $(VENV_TRL_OLDEST)/.installed
	$(REQUIRE_TRL) $(VENV_TRL)/bin/python -m pytest -q -p no:cacheprovider $(TRL_SUITE)
	$(REQUIRE_TRL) $(VENV_TRL_OLDEST)/bin/python -m pytest -q -p no:cacheprovider $(TRL_SUITE)

bench-trl: $(VENV_TRL)/.installed
	$(VENV_TRL)/bin/python benchmarks/trl_adapter.py

# OpenRLHF pins flash-attn, which does not build without CUDA: the CPU environment installs
# OpenRLHF --no-deps and its other requirements by hand (GPU users: pip install
# "advbudget[openrlhf]"); the tests put import stubs for flash_attn and vllm on the path.
VENV_OPENRLHF ?= .venv-openrlhf
OPENRLHF_PINS := $(call constrain,openrlhf)
$(VENV_OPENRLHF)/.installed: pyproject.toml $(PLUGIN)/pyproject.toml \
    $(call constraints_file,openrlhf)
	$(PYTHON) -m venv $(VENV_OPENRLHF)
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet --upgrade pip
	$(call install_torch,$(VENV_OPENRLHF),openrlhf)
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet --no-deps openrlhf==0.11.2 $(OPENRLHF_PINS)
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet "ray[default]==2.55.0" transformers==5.15.0 \
	  peft pylatexenc aiohttp torchdata pillow datasets accelerate $(OPENRLHF_PINS)
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet --no-build-isolation deepspeed==0.19.6 \
	  $(OPENRLHF_PINS)
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet -e ".[data,rewards]" pytest hypothesis \
	  $(OPENRLHF_PINS)
	$(VENV_OPENRLHF)/bin/python -m pip install --quiet --no-deps ./$(PLUGIN)
	$(call require_cpu_torch,$(VENV_OPENRLHF))
	touch $@

test-openrlhf: $(VENV_OPENRLHF)/.installed
	$(REQUIRE_OPENRLHF) $(VENV_OPENRLHF)/bin/python -m pytest -q -p no:cacheprovider \
	  tests/adapters/openrlhf $(CONTRACT) advbudget/adapters/openrlhf
	$(call upstream,$(VENV_OPENRLHF),openrlhf,tests)

bench-openrlhf: $(VENV_OPENRLHF)/.installed
	$(VENV_OPENRLHF)/bin/python benchmarks/openrlhf_adapter.py

# tunix is JAX-only: no torch to pin (its environment would not use one), jax on CPU.
VENV_TUNIX ?= .venv-tunix
$(VENV_TUNIX)/.installed: pyproject.toml $(PLUGIN)/pyproject.toml $(call constraints_file,tunix)
	$(PYTHON) -m venv $(VENV_TUNIX)
	$(VENV_TUNIX)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_TUNIX)/bin/python -m pip install --quiet -e ".[tunix]" pytest hypothesis \
	  $(call constrain,tunix)
	$(VENV_TUNIX)/bin/python -m pip install --quiet --no-deps ./$(PLUGIN)
	$(VENV_TUNIX)/bin/python -c "import importlib.util, sys; \
	  sys.exit('$(VENV_TUNIX): torch got installed; the tunix environment should have none') \
	  if importlib.util.find_spec('torch') else None"
	touch $@

test-tunix: $(VENV_TUNIX)/.installed
	$(REQUIRE_TUNIX) $(VENV_TUNIX)/bin/python -m pytest -q -p no:cacheprovider tests/adapters/tunix \
	  $(CONTRACT) advbudget/adapters/tunix

bench-tunix: $(VENV_TUNIX)/.installed
	$(VENV_TUNIX)/bin/python benchmarks/tunix_adapter.py

# SkyRL needs Python >= 3.12: the first python3.12 that runs, on PATH or pyenv's (on this
# image PATH has only pyenv's shim, which fails while 3.11 is the global version);
# PYTHON_SKYRL=/path/to/python3.12 chooses. Without one, make test says so in one
# line and skips this suite only. PyPI serves torch for 3.12 as a CUDA build only (2.6 GB of
# wheels, about 1 minute here; the environment is about 6 GB): torch comes from TORCH_PIN
# first, and the CUDA build is accepted on purpose. SkyRL's skyrl-train extra needs flash-attn
# (CUDA only): its other requirements are installed by hand (GPU users: pip install
# "advbudget[skyrl]"); nothing on SkyRL's CPU path imports flash-attn (the loop test stubs it).
ifeq ($(origin PYTHON_SKYRL),undefined)
  PYTHON_SKYRL := $(shell for python in python3.12 $(HOME)/.pyenv/versions/3.12*/bin/python3.12; \
    do $$python -c '' 2>/dev/null && { command -v $$python; break; }; done)
endif
VENV_SKYRL ?= .venv-skyrl
# Its constraints are locked on 3.12 (make lock with this environment), used on that Python.
SKYRL_LOCK_PYTHON := 3.12
PYTHON_SKYRL_VERSION := $(if $(PYTHON_SKYRL),$(shell $(PYTHON_SKYRL) -c \
  'import sys; print(*sys.version_info[:2], sep=".")'))
SKYRL_PINS := $(if $(filter $(SKYRL_LOCK_PYTHON),$(PYTHON_SKYRL_VERSION)),$(call constrain,skyrl))
SKYRL_TRAIN := ray==2.57.0 loguru tqdm ninja tensorboard func_timeout hydra-core==1.3.4 \
  accelerate torchdata omegaconf peft==0.18.1 debugpy==1.8.0 hf_transfer wandb "datasets>=4.0.0" \
  tensordict jaxtyping skyrl-gym polars s3fs "s5cmd>=0.3.3" gcsfs fastapi "orjson>=3.11.9" \
  "pybase64>=1.4.2" uvicorn vllm-router pybind11 setuptools
# SkyRL's hydra pins antlr 4.9 (as verl's omegaconf): math-verify with that antlr.
SKYRL_MATH_VERIFY := math-verify[antlr4_9_3]>=0.7
REQUIRE_SKYRL := ADVBUDGET_FRAMEWORK=skyrl \
  ADVBUDGET_REQUIRE=skyrl,skyrl_gym,ray,torch,advbudget_example_plugin
$(VENV_SKYRL)/.installed: pyproject.toml $(PLUGIN)/pyproject.toml $(call constraints_file,skyrl)
	$(PYTHON_SKYRL) -m venv $(VENV_SKYRL)
	$(VENV_SKYRL)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_SKYRL)/bin/python -m pip install --quiet "$(TORCH_PIN)" $(SKYRL_PINS)
	$(VENV_SKYRL)/bin/python -m pip install --quiet skyrl==0.4.0 "$(TORCH_PIN)" $(SKYRL_TRAIN) \
	  $(SKYRL_PINS)
	$(VENV_SKYRL)/bin/python -m pip install --quiet -e ".[data]" "$(SKYRL_MATH_VERIFY)" pytest \
	  hypothesis $(SKYRL_PINS)
	$(VENV_SKYRL)/bin/python -m pip install --quiet --no-deps ./$(PLUGIN)
	touch $@

test-skyrl:
ifeq ($(PYTHON_SKYRL),)
	@echo "test-skyrl: skipped: SkyRL needs Python >= 3.12, none found (python3.12 on PATH or pyenv's; set PYTHON_SKYRL)"
else
	$(MAKE) $(VENV_SKYRL)/.installed
	$(REQUIRE_SKYRL) $(VENV_SKYRL)/bin/python -m pytest -q -p no:cacheprovider tests/adapters/skyrl \
	  $(CONTRACT) advbudget/adapters/skyrl
endif

bench-skyrl: $(VENV_SKYRL)/.installed
	$(VENV_SKYRL)/bin/python benchmarks/skyrl_adapter.py

# make test's environments (its first step; after their definitions: prerequisites are
# expanded as make reads them).
environments: $(STAMP) $(VENV_VERL)/.installed $(VENV_TRL)/.installed \
  $(VENV_TRL_OLDEST)/.installed $(VENV_OPENRLHF)/.installed $(VENV_TUNIX)/.installed \
  $(if $(PYTHON_SKYRL),$(VENV_SKYRL)/.installed)

# The demo needs numpy and matplotlib only (the lab is numpy): its own small environment,
# no torch, no test stack; the core environment's versions.
VENV_DEMO ?= .venv-demo
$(VENV_DEMO)/.installed: pyproject.toml $(call constraints_file,core)
	$(PYTHON) -m venv $(VENV_DEMO)
	$(VENV_DEMO)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_DEMO)/bin/python -m pip install --quiet -e ".[lab,plot]" $(call constrain,core)
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
	$(BIN)/python benchmarks/weights.py
	$(BIN)/python benchmarks/state.py
	$(BIN)/python benchmarks/trajectories.py
	$(BIN)/python benchmarks/staleness.py
	$(MAKE) bench-rewards
	if [ -x $(VENV_VERL)/bin/python ]; then $(MAKE) bench-verl; fi
	if [ -x $(VENV_TRL)/bin/python ]; then $(MAKE) bench-trl; fi
	if [ -x $(VENV_OPENRLHF)/bin/python ]; then $(MAKE) bench-openrlhf; fi
	if [ -x $(VENV_TUNIX)/bin/python ]; then $(MAKE) bench-tunix; fi
	if [ -x $(VENV_SKYRL)/bin/python ]; then $(MAKE) bench-skyrl; fi
	$(BIN)/python benchmarks/report.py

clean:
	rm -rf $(VENV) $(VENV_DEMO) $(VENV_VERL) $(VENV_TRL) $(VENV_TRL_OLDEST) $(VENV_OPENRLHF) $(VENV_TUNIX) $(VENV_SKYRL) .venv-latest* .pytest_cache .mypy_cache .ruff_cache demo
