# Each target sets up its own virtual environment (.venv) on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-slow bench regress calibrate real-sessions clean

# setuptools tells every editable install of a package mapped from other folders to mind same-named
# folders (here ctxbench/ is the package itself): that notice alone is silenced, nothing else.
$(STAMP): pyproject.toml setup.py $(wildcard sim/engine/_*.c sim/engine/_*.h) strategies/_kernels.c strategies/_slot_offset.h
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

## run: the main job, `ctxbench run` on the default synthetic suite (results in results/)
run: $(STAMP)
	$(BIN)/ctxbench run $(ARGS)

## test: the test suite (unit, property, golden; benchmarks run once, untimed) but the tests marked
## slow (subprocesses, signals, notebooks), which `make test-slow` and .ci/run run; one worker per
## core (pytest-xdist), each test file on one worker so that its fixtures are made once
TEST_WORKERS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## test-slow: the tests marked slow
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

## bench: the timed microbenchmarks, with JSON written to .benchmarks/latest.json
bench: $(STAMP)
	$(BIN)/python -m pytest tests/benchmarks --benchmark-enable --benchmark-json=.benchmarks/latest.json

## regress: the regression gate against the committed baseline
regress: $(STAMP)
	$(BIN)/ctxbench regress

## real-sessions: the bundled real sessions (data/real-sessions) unpacked into real-sessions/, one folder per agent;
## unpacked again when an archive changes (a folder this target made, marked by its .unpacked, is replaced)
real-sessions/.unpacked: $(wildcard data/real-sessions/*) | $(STAMP)
	if [ -f real-sessions/.unpacked ]; then rm -rf real-sessions; fi
	$(BIN)/python -c "import sys; from ctxbench.traces.real_sessions import unpack; unpack(sys.argv[1])" real-sessions
	touch real-sessions/.unpacked

real-sessions: real-sessions/.unpacked

## calibrate: re-fit the bytes per token of each model family on the bundled sessions they were fitted on
## (claude: the Claude Code session 258c7280 and its subagents; deepseek: the two mini-swe-agent sessions)
calibrate: real-sessions/.unpacked
	$(BIN)/ctxbench calibrate real-sessions/claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl \
		real-sessions/claude-code/258c7280-ae70-4798-800f-63464d01a85d real-sessions/mini-swe-agent

clean:
	rm -rf $(VENV) results .pytest_cache .hypothesis .benchmarks
