# Quick start: `make course` (set up, then run every notebook headlessly and print the summary),
# `make test` (the test suite CI runs), `make lab` (open the course in JupyterLab).
PYTHON ?= python3
# The torch to install. The default is a release this course is tested with; on a GPU node
# that already has torch, reuse it with `make install TORCH=` (empty: keep what pip finds).
TORCH ?= torch==2.13.0
VENV ?= .venv
PROFILE ?= auto
BIN := $(VENV)/bin

.PHONY: install course test lab bundle clean

$(BIN)/nvtutorial: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(if $(TORCH),$(BIN)/python -m pip install "$(TORCH)")
	$(BIN)/python -m pip install -e ".[test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (nvtutorial)"
	touch $@

install: $(BIN)/nvtutorial

course: install
	$(BIN)/nvtutorial course --profile $(PROFILE) --out build/course

# Each notebook executes once per run (tests/test_notebooks.py); the executed copies stay in build/executed.
test: install
	$(BIN)/ruff check .
	rm -rf build/executed
	NVTUTORIAL_EXECUTED_DIR=$(CURDIR)/build/executed $(BIN)/python -m pytest -ra --durations=25 tests

lab: install
	$(BIN)/jupyter lab notebooks/

bundle: install
	$(BIN)/nvtutorial bundle --out wheels

clean:
	rm -rf $(VENV) build runs wheels
