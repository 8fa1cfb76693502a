# DARE: two commands for a fresh machine.
#   make demo        create .venv, install the core + first-party plugins, run the quickstart, SFT -> RL
#   make test        same install, then the whole test suite (prints the 25 slowest tests)
#   make test-fast   same install, then the unit tier (conftest.py) on 2 workers: no training runs, no subprocesses
PYTHON ?= python3
VENV ?= .venv
PIP := $(VENV)/bin/pip

# Which PyTorch build `make install` puts into .venv: TORCH_BUILD=cpu|cuda|default (default: default).
#   default  `pip install torch==$(TORCH_VERSION)` from pip's configured sources: on PyPI for Linux x86_64 that is
#            the CUDA build (several GB of CUDA libraries); a machine with local wheels gets what they hold
#   cpu      torch==$(TORCH_VERSION)+cpu: from pip's configured sources when they hold it (offline, local wheels),
#            otherwise with PyTorch's CPU index added to them (--extra-index-url; every other package still comes
#            from pip's configured index)
#   cuda     torch==$(TORCH_VERSION)+$(TORCH_CUDA) the same way, with PyTorch's $(TORCH_CUDA) index
# The install prints the build it got and fails when it is not the one asked for. Switching TORCH_BUILD on an
# existing .venv reinstalls torch. TORCH=<requirement> still replaces the whole choice (e.g. TORCH=torch==2.6.0).
TORCH_VERSION ?= 2.13.0
TORCH_BUILD ?= default
TORCH_CUDA ?= cu128
TORCH_INDEX_BASE ?= https://download.pytorch.org/whl
ifeq ($(TORCH_BUILD),cpu)
  TORCH ?= torch==$(TORCH_VERSION)+cpu
  TORCH_INDEX := $(TORCH_INDEX_BASE)/cpu
else ifeq ($(TORCH_BUILD),cuda)
  TORCH ?= torch==$(TORCH_VERSION)+$(TORCH_CUDA)
  TORCH_INDEX := $(TORCH_INDEX_BASE)/$(TORCH_CUDA)
else ifeq ($(TORCH_BUILD),default)
  TORCH ?= torch==$(TORCH_VERSION)
  TORCH_INDEX :=
else
  $(error TORCH_BUILD must be cpu, cuda or default (got '$(TORCH_BUILD)'); e.g. make install TORCH_BUILD=cpu)
endif
# PyTorch's index, added to pip's configured sources, only when they cannot install the pinned build on their own
TORCH_SOURCE := $(if $(TORCH_INDEX),$$($(PIP) install --quiet --dry-run --no-index --no-deps "$(TORCH)" >/dev/null 2>&1 \
  || echo --extra-index-url $(TORCH_INDEX)))
TORCH_CHECK := import sys, torch; b, c = sys.argv[1], torch.version.cuda; \
  print("installed torch", torch.__version__, "(" + ("CUDA " + c if c else "CPU") + " build; TORCH_BUILD=" + b + ")"); \
  sys.exit("TORCH_BUILD=" + b + " asked for another build" if (b == "cpu") == bool(c) and b != "default" else 0)

# dare-plugin-opencompass needs OpenCompass's own environment (numpy<2, datasets<4): docs/evaluation.md,
# benchmarks/opencompass_check.sh
PLUGINS := $(filter-out plugins/dare-plugin-opencompass,$(sort $(wildcard plugins/dare-plugin-*)))
STAMP := $(VENV)/.dare-installed-$(TORCH_BUILD)

.PHONY: install demo demo-seeds test test-fast schema bench clean clean-runs

$(STAMP): pyproject.toml $(foreach p,$(PLUGINS),$(p)/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH)" $(TORCH_SOURCE)
	$(PIP) install --quiet -e ".[test]" $(foreach p,$(PLUGINS),-e $(p))
	$(VENV)/bin/python -c '$(TORCH_CHECK)' $(TORCH_BUILD)
	rm -f $(VENV)/.dare-installed-*
	@# the code sandbox's namespace layer (plugins/dare-plugin-code/docs/sandbox.md): installed as root, else reported
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get install -y -qq bubblewrap >/dev/null 2>&1; } || \
	  echo "note: bubblewrap is not installed; the code sandbox runs with its native layers only (apt-get install bubblewrap)"
	touch $(STAMP)

install: $(STAMP)

DARE := $(VENV)/bin/dare

# The quickstart, then SFT -> RL: online RL on real Sudoku puzzles from the quickstart's step-250
# checkpoint (the same weights examples/quickstart-sft-short.yaml ends with: same spec, constant
# learning rate, so the demo does not train those 250 steps twice), and one report with untrained, SFT
# and RL scores side by side (runs/demo/comparison.{md,png}).
# DEMO_ARGS: overrides for both runs, e.g. make demo DEMO_ARGS="--set train.num_threads=1" (faster under load)
RL_START := runs/quickstart/checkpoints/checkpoint-250
DEMO_ARGS ?=
demo: install
	$(DARE) run examples/quickstart.yaml $(DEMO_ARGS)
	$(DARE) run examples/quickstart-rl.yaml --set model.path=$(RL_START) $(DEMO_ARGS)
	$(DARE) compare -o runs/demo --title "DARE demo: 4x4 Sudoku (untrained, SFT, SFT + RL)" \
	  "untrained=runs/quickstart:before" \
	  "SFT 250 steps (RL start)=runs/quickstart-rl:before" \
	  "SFT 250 steps + RL=runs/quickstart-rl:after" \
	  "SFT 750 steps=runs/quickstart:after"

# The RL stage of the demo over seeds 0, 1, 2 (a sweep: docs/scaling.md), from the same SFT start; writes
# runs/demo-seeds/comparison.{md,png}: before / after per seed, the mean gain and its 95 % intervals
demo-seeds: install
	$(DARE) run examples/quickstart.yaml $(DEMO_ARGS)
	$(DARE) sweep examples/quickstart-rl.yaml --set model.path=$(RL_START) $(DEMO_ARGS) --seeds 0,1,2 -o runs/demo-seeds

test: install
	$(VENV)/bin/python -m pytest -q --durations=25

# the unit tier (every test's kind: conftest.py), 2 workers of one torch thread each
test-fast: install
	OMP_NUM_THREADS=1 $(VENV)/bin/python -m pytest -q -m unit -n 2

schema: install
	$(VENV)/bin/dare schema --first-party -o schemas/run-spec.schema.json

bench: install
	$(VENV)/bin/python benchmarks/bench_quickstart.py

# removes the virtual environment only: runs/ (your trained models and reports) stays; `make clean-runs` deletes it
clean:
	rm -rf $(VENV)

clean-runs:
	rm -rf runs
