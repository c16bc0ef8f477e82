# Two commands on a fresh clone: `make run` and `make test`. Everything else is optional.
# Any python3 (3.9 or later) bootstraps uv; uv makes the project's venv with PYTHON_VERSION, the
# version the tests run on: an installed one, else (with internet) uv's managed build, fetched.
PYTHON ?= python3
PYTHON_VERSION := 3.11
UV_VERSION := 0.13.8
UV_HOME := .uv
UV := $(UV_HOME)/bin/uv
UV_STAMP := $(UV_HOME)/.uv-$(UV_VERSION)
VENV := .venv
BIN := $(VENV)/bin
# a stamp's name carries a checksum of what it installs (POSIX cksum: CRC and size)
checksum = $(shell cat $(1) | cksum | sed 's/ /-/')
STAMP := $(VENV)/.installed-$(call checksum,requirements.lock pyproject.toml)
# the test tools (pytest, hypothesis, moto, playwright...): `make test` installs them, `make run` does not
DEV_STAMP := $(VENV)/.dev-$(call checksum,requirements-dev.lock)
# the trainers test group's extras (TRL, transformers, CPU torch), reinstalled when their lock changes
# Axolotl, for its tokenization of the axolotl export: its wheel pins ~240 packages exactly (another
# transformers and TRL among them, and CUDA builds), so it cannot join the lock; installed without
# its dependencies, its chat_template strategy runs on the lock's transformers and torch, and needs
# only these two more (tests/trainers/test_axolotl.py)
AXOLOTL := axolotl==0.19.0 colorama==0.4.6 addict==2.4.0
TRAIN_STAMP := $(VENV)/.trainers-$(shell (cat requirements-train.lock; echo $(AXOLOTL)) | cksum | sed 's/ /-/')
TORCH := torch==2.13.0
# redaction's prefilter runs on Hyperscan where it has a wheel (x86_64; its pin is also in
# pyproject.toml), else on ahocorasick-rs from the lock, which finds the same, 3-4x slower
HYPERSCAN := hyperscan==0.9.1
# where pip's find-links config finds the CPU torch wheel; `make lock` resolves against it
TORCH_WHEELS ?= /opt/wheels
# the project's instance, for `make run` and `make ui` (tests use temporary ones)
DAGSTER_HOME := $(CURDIR)/dagster_home
UI_PORT ?= 3000

.PHONY: setup dev trainers browser postgres run test test-fast ui bench bench-ui lock sample clean

setup: $(STAMP)

# uv, pinned, in a venv of its own made by whatever python3 is here: the only use of it
$(UV_STAMP):
	test -x $(UV_HOME)/bin/python || $(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	rm -f $(UV_HOME)/.uv-*
	touch $@

# The environment is rebuilt whenever the lock file or pyproject changes (a venv of another
# Python is replaced). Bytecode is compiled at install time: with PYTHONDONTWRITEBYTECODE set
# (as here) every process would otherwise recompile Dagster on import, seconds per run.
$(STAMP): requirements.lock pyproject.toml $(UV_STAMP)
	$(BIN)/python -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(PYTHON_VERSION)")' 2>/dev/null \
	  || $(UV) venv --quiet --clear --python $(PYTHON_VERSION) $(VENV)
	$(UV) pip install --quiet --compile-bytecode --python $(BIN)/python -r requirements.lock
	if [ "$$(uname -m)" = x86_64 ]; then $(UV) pip install --quiet --python $(BIN)/python $(HYPERSCAN); fi
	$(UV) pip install --quiet --python $(BIN)/python --no-deps -e .
	rm -f $(VENV)/.installed-*
	touch $@

# The test tools, pinned by the dev lock (compiled against the runtime lock: no runtime pin moves)
dev: $(DEV_STAMP)

$(DEV_STAMP): requirements-dev.lock $(STAMP)
	$(UV) pip install --quiet --compile-bytecode --python $(BIN)/python -r requirements-dev.lock
	rm -f $(VENV)/.dev-*
	touch $@

# Only for tests/trainers (`make run` stays light). torch goes through pip, which takes the local
# CPU wheel (uv would fetch the multi-GB CUDA build), its dependencies pinned by the trainers lock;
# that lock leaves torch out, so uv then installs the rest around the torch already there. (uv's
# venv has no pip: it is added here, for torch alone.)
trainers: $(TRAIN_STAMP)

$(TRAIN_STAMP): requirements-train.lock $(DEV_STAMP)
	$(UV) pip install --quiet --python $(BIN)/python pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements-train.lock $(TORCH)
	$(UV) pip install --quiet --compile-bytecode --python $(BIN)/python -r requirements-train.lock
	$(UV) pip install --quiet --compile-bytecode --python $(BIN)/python --no-deps $(AXOLOTL)
	rm -f $(VENV)/.trainers-*
	touch $@

run: setup
	DAGSTER_HOME=$(DAGSTER_HOME) $(BIN)/trajectory-assets run --source samples/rollouts --storage data
	@echo
	@echo "Datasets: data/exports/<export>/ (seed formats as .jsonl, TRL and verl as .parquet; manifest.json, README.md)"
	@echo "Report:   data/reports/index.html (open in a browser), data/reports/stats.md"
	@echo "Quarantine: data/quarantine/rejected.jsonl"
	@echo "UI:       make ui, then open http://127.0.0.1:$(UI_PORT) (DAGSTER_HOME=dagster_home)"

# Every tier (tests/conftest.py): unit and contract, end-to-end, system; a test file per
# worker process, one worker per CPU
test: dev browser postgres trainers
	$(BIN)/python -m pytest -n auto --dist loadfile

# The inner loop: the unit and contract tests alone (no Dagster instance): about 7 minutes on
# this shared 2-core machine, most of it the export phase's refresh and shard tests
test-fast: dev
	$(BIN)/python -m pytest -m "not e2e and not system"

# The browser test drives Debian's Chromium (Playwright never downloads a browser here).
browser:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is not installed and this is not root: the browser test will be skipped"; fi; }

# The Postgres instance tests start a real server from Debian's postgresql (initdb, pg_ctl)
# on a loopback port; they are skipped, with the reason shown, when it cannot be installed.
# (No default cluster: nothing but the tests' own servers ever runs.)
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    mkdir -p /etc/postgresql-common && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else echo "postgresql is not installed and this is not root: the Postgres tests will be skipped"; fi; }

ui: setup
	DAGSTER_HOME=$(DAGSTER_HOME) $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p $(UI_PORT)

bench: setup
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.redaction

# the UI path (dagster dev, sensor, automation) against the CLI on ../shared/corpus/nemo_gym
bench-ui: setup
	$(BIN)/python -m bench.ui

# Regenerate the lock files after editing a requirements*.in (needs the registry). uv keeps each
# lock's current pins unless the .in files need others (`--upgrade` moves them). The dev and
# trainers locks are constrained by the runtime lock, the trainers lock by the dev lock too (one
# venv holds them all). torch resolves against the local CPU wheel, so no nvidia-*/triton enter it.
lock: $(UV_STAMP)
	$(UV) pip compile --quiet requirements.in -o requirements.lock --python-version $(PYTHON_VERSION)
	$(UV) pip compile --quiet requirements-dev.in -o requirements-dev.lock --python-version $(PYTHON_VERSION)
	$(UV) pip compile --quiet requirements-train.in -o requirements-train.lock --python-version $(PYTHON_VERSION) \
	  --no-emit-package torch --find-links $(TORCH_WHEELS)

sample: setup
	$(BIN)/python samples/make_sample.py

clean:
	rm -rf data $(VENV) $(UV_HOME) .pytest_cache
