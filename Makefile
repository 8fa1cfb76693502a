# DARE: two commands for a fresh machine.
#   make demo   create .venv, install the core + first-party plugins (CPU torch), run the quickstart
#   make test   same install, then the test suite
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PIP := $(VENV)/bin/pip
PLUGINS := $(sort $(wildcard plugins/dare-plugin-*))
STAMP := $(VENV)/.dare-installed

.PHONY: install demo test schema bench clean

$(STAMP): pyproject.toml $(wildcard plugins/*/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH)" -e ".[test]" $(foreach p,$(PLUGINS),-e $(p))
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/dare run examples/quickstart.yaml

test: install
	$(VENV)/bin/python -m pytest -q

schema: install
	$(VENV)/bin/dare schema

bench: install
	$(VENV)/bin/python benchmarks/bench_quickstart.py

clean:
	rm -rf $(VENV) runs
