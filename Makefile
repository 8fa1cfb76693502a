# DARE: two commands for a fresh machine.
#   make demo   create .venv, install the core + first-party plugins (CPU torch), run the quickstart, SFT -> RL
#   make test   same install, then the test suite
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PIP := $(VENV)/bin/pip
# dare-plugin-opencompass needs OpenCompass's own environment (numpy<2, datasets<4): docs/evaluation.md,
# benchmarks/opencompass_check.sh
PLUGINS := $(filter-out plugins/dare-plugin-opencompass,$(sort $(wildcard plugins/dare-plugin-*)))
STAMP := $(VENV)/.dare-installed

.PHONY: install demo test schema bench clean clean-runs

$(STAMP): pyproject.toml $(foreach p,$(PLUGINS),$(p)/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH)" -e ".[test]" $(foreach p,$(PLUGINS),-e $(p))
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
RL_START := runs/quickstart/checkpoints/checkpoint-250
demo: install
	$(DARE) run examples/quickstart.yaml
	$(DARE) run examples/quickstart-rl.yaml --set model.path=$(RL_START)
	$(DARE) compare -o runs/demo --title "DARE demo: 4x4 Sudoku (untrained, SFT, SFT + RL)" \
	  "untrained=runs/quickstart:before" \
	  "SFT 250 steps (RL start)=runs/quickstart-rl:before" \
	  "SFT 250 steps + RL=runs/quickstart-rl:after" \
	  "SFT 750 steps=runs/quickstart:after"

test: install
	$(VENV)/bin/python -m pytest -q

schema: install
	$(VENV)/bin/dare schema --first-party -o schemas/run-spec.schema.json

bench: install
	$(VENV)/bin/python benchmarks/bench_quickstart.py

# removes the virtual environment only: runs/ (your trained models and reports) stays; `make clean-runs` deletes it
clean:
	rm -rf $(VENV)

clean-runs:
	rm -rf runs
