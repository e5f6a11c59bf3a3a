# Quick start: `make course` (set up, then run every notebook headlessly and print the summary),
# `make test` (the test suite CI runs), `make lab` (open the course in JupyterLab),
# `make site` (build the course website into build/site), `make site-serve` (and serve it locally).
PYTHON ?= python3
# The torch to install. The default is a release this course is tested with (CI installs it). On a GPU node whose
# Python already has torch, `make install TORCH=` keeps it: the environment then sees that Python's packages
# (--system-site-packages), and pip keeps a torch in the supported range (pyproject.toml), or installs one in range
# beside it. PYTHON is that Python (a container's, a conda environment's, a module's); a virtual environment's torch
# is not seen this way (a venv made from a venv sees the base Python's packages, not the first venv's).
TORCH ?= torch==2.13.0
VENV ?= .venv
PROFILE ?= auto
BIN := $(VENV)/bin

SITE_ENV ?= build/site-env
SITE_PORT ?= 8000
# The executed copies of the notebooks that `make site` and `make test` share (site/executed.py): each takes the
# other's current copies and executes only what is missing, so each notebook runs once per CI run. FRESH=1
# executes everything again.
EXECUTED ?= build/executed
# SITE_EXECUTE=0: `make site` executes nothing and needs current copies already (from `make test`);
# SITE_JOBS: notebooks it executes at once.
SITE_EXECUTE ?= 1
SITE_JOBS ?= 2
# The course's language: `make course LANG=zh` and `make lab LANG=zh` take the Chinese edition (notebooks/zh/, generated
# from the English notebooks: docs/translation.md). Only LANG given on make's command line counts (zh, zh_CN...): the
# LANG of the environment (a locale, en_US.UTF-8 or zh_CN.UTF-8) does not, and the command line's is not passed on to
# the commands as a locale.
ZH := $(if $(and $(filter command line,$(origin LANG)),$(filter zh%,$(LANG))),1)
ifeq ($(origin LANG),command line)
unexport LANG
endif

.PHONY: install course test test-site nbval-outputs mutate mutate-before lab site site-serve bundle clean clean-runs \
	zh-update zh-build zh-check

# pip byte-compiles what it installs: keep it so (no --no-compile). Where PYTHONDONTWRITEBYTECODE is set (as on the CI
# machines), a file pip did not compile is compiled again by every process that imports it: with torch's thousands,
# every rank's start-up: one of the two test streams took 964 s instead of 619 s.
# EXTRAS=test installs the test tools in the same pip call (one resolution, one editable build: CI does so).
EXTRAS ?=
$(BIN)/nvtutorial: pyproject.toml
	$(PYTHON) -m venv $(if $(TORCH),,--system-site-packages) $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install $(if $(TORCH),"$(TORCH)") -e ".$(if $(EXTRAS),[$(EXTRAS)])"
	@$(BIN)/python -c "import torch; print('nvtutorial: torch', torch.__version__, 'from', torch.__path__[0])"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (nvtutorial)"
	touch $@

install: $(BIN)/nvtutorial

# The test tools (pytest, nbval, ruff, pyright, Playwright) on top, for the targets that test: `make course` and
# `make lab` do without them (17 s less of a fresh install on the 2-core machine, and no Node.js).
$(VENV)/.test-extra: $(BIN)/nvtutorial
	$(if $(filter test,$(EXTRAS)),,$(BIN)/python -m pip install -e ".[test]")
	touch $@

# LANG=zh: the Chinese notebooks, executed into build/course-zh (the same code cells: the same runs and checks).
course: install
	$(BIN)/nvtutorial course --profile $(PROFILE) $(if $(ZH),--notebooks notebooks/zh --out build/course-zh,--out build/course)

# Each notebook executes once per run (tests/notebooks/test_jupyterlab.py: Run All in JupyterLab where Chromium is installed, else
# papermill in tests/notebooks/test_notebooks.py), unless `make site` already made a current copy of it in $(EXECUTED): stale
# copies (other text, other code) are removed first; the executed copies stay there.
test: $(VENV)/.test-extra
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python site/executed.py prune $(EXECUTED) $(if $(FRESH),--all)
	NVTUTORIAL_EXECUTED_DIR=$(abspath $(EXECUTED)) scripts/test.sh $(BIN)/python

# The notebooks' committed CPU outputs that nbval compares in `make test` (tests/nbval/: the cells marked
# `# NBVAL_CHECK_OUTPUT`): execute every notebook (ci profile) and write them. After a change to a notebook's code
# cells, or to what a marked cell prints: `make nbval-outputs`, review `git diff tests/nbval`, commit.
# NBVAL_FROM=DIR takes notebooks already executed into DIR (`nvtutorial course --profile ci --out DIR`) instead.
nbval-outputs: $(VENV)/.test-extra
	$(BIN)/python -m tests.helpers.nbval_outputs regenerate $(if $(NBVAL_FROM),--from $(NBVAL_FROM))

# Mutation testing (outside CI; scripts/mutate.py says why mutmut): one-token changes to the verdict rules, guards,
# diagnosis, collectives lessons and exercise checkers, against the fast tests; the score per module goes to
# benchmarks/results/mutation-after.json. MUTATE_SAMPLE mutants per module, drawn with a fixed seed (each score with its
# 95 % interval; about half an hour on 2 cores at 10); MUTATE_SAMPLE=0 runs every mutant (17,000: many hours).
# MUTATE_ARGS="--only nvtutorial/launch/guards.py" for one module; MUTATE_ARGS=--recheck after writing tests: only the
# mutants not caught last time, against today's tests; `make mutate-before` measures commit e1ea54c (before the rule
# tests) with the same tool and the same sample rule.
MUTATE_SAMPLE ?= 10
MUTATE_ARGS ?=
mutate: $(VENV)/.test-extra
	$(BIN)/python -m pip install --quiet "mutmut==3.8.1"
	$(BIN)/python scripts/mutate.py run --label after --sample $(MUTATE_SAMPLE) $(MUTATE_ARGS)

mutate-before: $(VENV)/.test-extra
	$(BIN)/python -m pip install --quiet "mutmut==3.8.1"
	$(BIN)/python scripts/mutate.py run --label before --source e1ea54c --sample $(MUTATE_SAMPLE) $(MUTATE_ARGS)

# The tests of the built website (build/site, `make site`): its check, and every page in headless Chromium. `make test`
# runs them too, skipped with the reason when no current site is built; CI builds the site after `make test` (from
# the copies the tests executed) and runs these then.
test-site: $(VENV)/.test-extra
	$(BIN)/python -m pytest -ra -p no:cacheprovider tests/site

# JupyterLab on notebooks/ (--allow-root only as root). Extra arguments: make lab LAB_ARGS="--no-browser --port 8888"
# LANG=zh: on notebooks/zh/, JupyterLab in Simplified Chinese (its zh-CN language pack, 0.2 MB, installed then).
lab: install $(if $(ZH),$(VENV)/.lang-zh)
	$(BIN)/python -m nvtutorial.lab $(if $(ZH),--lang zh notebooks/zh,notebooks) $(LAB_ARGS)

$(VENV)/.lang-zh: $(BIN)/nvtutorial
	$(BIN)/python -m pip install jupyterlab-language-pack-zh-CN
	touch $@

# The course website's toolchain (Jupyter Book 1), pinned in site/requirements.txt, in its own environment.
$(SITE_ENV)/bin/jupyter-book: site/requirements.txt
	$(PYTHON) -m venv $(SITE_ENV)
	$(SITE_ENV)/bin/python -m pip install --upgrade pip
	$(SITE_ENV)/bin/python -m pip install -r site/requirements.txt
	touch $@

# The website of the current notebooks into build/site: each page with the outputs of a GPU copy of the same text
# (reference/), else of the CPU copy in $(EXECUTED) (executed now, ci profile, when missing or stale); fails when a
# page's cells differ from its notebook's, on any Sphinx warning, broken link or missing image.
site: install $(SITE_ENV)/bin/jupyter-book
	$(BIN)/python site/build_site.py --jupyter-book $(SITE_ENV)/bin/jupyter-book --out build/site \
		--executed $(EXECUTED) --jobs $(SITE_JOBS) $(if $(FRESH),--fresh) $(if $(filter 0,$(SITE_EXECUTE)),--no-execute)

site-serve: site
	@echo "serving build/site at http://127.0.0.1:$(SITE_PORT)/ (Ctrl-C to stop)"
	$(BIN)/python -m http.server --bind 127.0.0.1 --directory build/site $(SITE_PORT)

# The Chinese edition (issue 31, docs/translation.md): the English notebooks stay the only source. `make zh-update`
# extracts their markdown cells into locale/zh_CN/LC_MESSAGES/NN_name.po (a changed cell's translation kept, marked
# fuzzy); `make zh-build` writes notebooks/zh/ from them (refusing a notebook with a stale or missing entry);
# `make zh-check` lists stale, missing and obsolete entries, lost code spans and links, glossary misses, and generated
# notebooks that are not current. ZH_ARGS="--only 00" for one notebook, ZH_ARGS=--allow-missing (zh-build) or
# ZH_ARGS=--strict (zh-check: glossary misses fail too).
ZH_ARGS ?=
zh-update: install
	$(BIN)/python scripts/translate_notebooks.py update $(ZH_ARGS)

zh-build: install
	$(BIN)/python scripts/translate_notebooks.py build $(ZH_ARGS)

zh-check: install
	$(BIN)/python scripts/translate_notebooks.py check $(ZH_ARGS)

bundle: install
	$(BIN)/nvtutorial bundle --out wheels

# The finished runs of the notebooks (notebooks/.runs) and of the command line (.runs); runs in flight stay.
clean-runs: install
	cd notebooks && ../$(BIN)/nvtutorial clean
	$(BIN)/nvtutorial clean

clean:
	rm -rf $(VENV) build runs .runs notebooks/.runs wheels
