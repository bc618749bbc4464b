# cbt — the two commands a new user needs:
#   make demo   install what the library needs, build the library and the cbt
#               command alone (no tests, no benchmarks), run the demo workload
#   make test   install what is missing (cmocka, python3-venv, clang with
#               libFuzzer too), build, run every test: plain build (CUDA files
#               compiled by nvcc when present), the whole suite under
#               ASan+UBSan, then under TSan, then a 20 s fuzz run; what was
#               skipped (SKIP: lines) is repeated at the end; the Python
#               package is built and its pytest suite run after the plain
#               build's tests (scripts/pytest.sh)
# Other targets: build, test-plain, test-python, test-asan, test-tsan, bench, clean, fuzz,
# wheel (the Python package as a manylinux wheel in dist/: scripts/wheel.sh).
# CBT_NO_DEPS=1 skips scripts/deps.sh (you provide what it would install);
# CBT_DEPS_DRY_RUN=1 makes it print what it would install, and go on.
SHELL := /bin/bash
JOBS ?= 2
BUILD ?= build
CMAKE_FLAGS ?=
FUZZ_LOG = $(BUILD)/fuzz.log
PY_LOG = $(BUILD)/python.log

.PHONY: all deps deps-lib deps-fuzz build demo test test-plain test-python test-asan test-tsan bench clean fuzz wheel test-lmcache-server

all: build

# scripts/deps.sh: test = everything make test uses; lib = the library and
# the cbt command; fuzz = clang with libFuzzer
deps:
	@scripts/deps.sh test

deps-lib:
	@scripts/deps.sh lib

deps-fuzz:
	@scripts/deps.sh fuzz

# The test builds say -DCBT_BUILD_TESTS=ON: without cmocka they stop, they
# never quietly build no tests.
build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCBT_BUILD_TESTS=ON -DCBT_BUILD_BENCH=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

# The demo needs the library and the command (./build/cbt), nothing else.
demo: deps-lib
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCBT_BUILD_TESTS=OFF -DCBT_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS) --target cbt_cli
	./$(BUILD)/cbt demo --requests 32 --output cbt-trace.json --spans cbt-spans.jsonl
	@echo "cbt: trace file $(CURDIR)/cbt-trace.json: open it at https://ui.perfetto.dev (drag the file in) or chrome://tracing"
	@echo "cbt: spans also in $(CURDIR)/cbt-spans.jsonl (one JSON object per line)"

test: test-plain test-python test-asan test-tsan fuzz
	@skips="$$(cat $(BUILD)/Testing/Temporary/LastTest.log build-asan/Testing/Temporary/LastTest.log \
	    build-tsan/Testing/Temporary/LastTest.log $(PY_LOG) $(FUZZ_LOG) 2>/dev/null | grep '^SKIP:' | awk '!seen[$$0]++')"; \
	if [ -n "$$skips" ]; then \
	  echo "cbt: make test passed (plain, Python, ASan/UBSan, TSan, fuzz), with these skipped:"; echo "$$skips"; \
	else \
	  echo "cbt: make test passed (plain, Python, ASan/UBSan, TSan, fuzz), nothing skipped"; \
	fi

test-plain: build
	@scripts/pydeps.sh || echo "cbt: the official OTLP decode test will report itself skipped"
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)
	@grep -h "^SKIP:" $(BUILD)/Testing/Temporary/LastTest.log || true

# The Python package (pyproject.toml) built as the repaired wheel `make wheel`
# makes (into build/wheel/), installed into the venv build/pyenv, and its
# pytest suite (tests/python/) run against it; test_packaging.py also installs
# that wheel into a fresh venv with the development packages hidden
# (scripts/wheel_test.sh). scripts/pytest.sh prints a SKIP: line instead when
# PyPI cannot be reached. The output is kept in $(PY_LOG) for make test's
# summary.
test-python: $(if $(filter test,$(MAKECMDGOALS)),test-plain,deps)
	@mkdir -p $(BUILD)
	@set -o pipefail; scripts/pytest.sh 2>&1 | tee $(PY_LOG)

# Opt-in, not part of `make test`: a real LMCache 0.5.6 MP server on the CPU
# with cbt's bridge, driven by LMCache's own `lmcache bench server`, its
# spans checked (trees, the gpu-level recording replayed, the token trace
# through LMCache 0.5.7's `lmcache bench trace-analyze`). It installs LMCache
# with torch (~6 GB) into ${CBT_LMCACHE_SERVER_VENV:-~/.cache/cbt/lmcache-0.5.6}
# once; docs/testing.md. A skip (no index, no Python 3.11, no disk) prints
# its SKIP: line and exits 0.
test-lmcache-server: deps-lib
	@tests/lmcache/server_test.sh; rc=$$?; [ $$rc -eq 77 ] && exit 0; exit $$rc

# The Python package as one wheel that installs where none of its build's
# development packages are: built as `pip install .` builds it, repaired with
# auditwheel (the libraries it links bundled, tagged manylinux; never the
# CUDA runtime or CUPTI), checked, and left in dist/ (docs/install.md).
wheel: deps-lib
	@scripts/wheel.sh $(CURDIR)/dist

# Sanitizer builds leave CUDA out: the CUDA runtime is not built for them,
# and the plain build already compiles and runs every CUDA file.
test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCBT_WITH_CUDA=OFF \
	  -DCBT_SANITIZE=address,undefined -DCBT_BUILD_TESTS=ON -DCBT_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build build-asan -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan --output-on-failure -j$(JOBS)

test-tsan: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DCBT_WITH_CUDA=OFF \
	  -DCBT_SANITIZE=thread -DCBT_BUILD_TESTS=ON -DCBT_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build build-tsan -j$(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --test-dir build-tsan --output-on-failure -j$(JOBS)

bench: deps-lib
	cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DCBT_BUILD_TESTS=OFF $(CMAKE_FLAGS)
	cmake --build build-release -j$(JOBS)
	./build-release/bench/bench_publish

clean:
	rm -rf $(BUILD) build-asan build-tsan build-release dist

# Within make test, deps has already seen to clang and libFuzzer. The output
# is kept in $(FUZZ_LOG) so that make test can repeat a SKIP: line at its end.
fuzz: $(if $(filter test,$(MAKECMDGOALS)),,deps-fuzz)
	@mkdir -p $(BUILD)
	@set -o pipefail; scripts/fuzz.sh 2>&1 | tee $(FUZZ_LOG)
