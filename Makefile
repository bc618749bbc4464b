# cbt — the two commands a new user needs:
#   make demo   install what is missing, build, run the demo workload
#   make test   install what is missing, build, run every test: plain build
#               (CUDA files compiled by nvcc when present), then the whole
#               suite under ASan+UBSan, then under TSan
# Other targets: build, test-plain, test-asan, test-tsan, bench, clean.
JOBS ?= 2
BUILD ?= build
CMAKE_FLAGS ?=

.PHONY: all deps build demo test test-plain test-asan test-tsan bench clean fuzz

all: build

deps:
	@scripts/deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	./$(BUILD)/cbt demo --requests 32 --output cbt-trace.json --spans cbt-spans.jsonl
	@echo "cbt: trace file $(CURDIR)/cbt-trace.json: open it at https://ui.perfetto.dev (drag the file in) or chrome://tracing"
	@echo "cbt: spans also in $(CURDIR)/cbt-spans.jsonl (one JSON object per line)"

test: test-plain test-asan test-tsan fuzz

test-plain: build
	@scripts/pydeps.sh || echo "cbt: the official OTLP decode test will report itself skipped"
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)
	@grep -h "^SKIP:" $(BUILD)/Testing/Temporary/LastTest.log || true

# Sanitizer builds leave CUDA out: the CUDA runtime is not built for them,
# and the plain build already compiles and runs every CUDA file.
test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCBT_WITH_CUDA=OFF \
	  -DCBT_SANITIZE=address,undefined -DCBT_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build build-asan -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan --output-on-failure -j$(JOBS)

test-tsan: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DCBT_WITH_CUDA=OFF \
	  -DCBT_SANITIZE=thread -DCBT_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build build-tsan -j$(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --test-dir build-tsan --output-on-failure -j$(JOBS)

bench: deps
	cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DCBT_BUILD_TESTS=OFF $(CMAKE_FLAGS)
	cmake --build build-release -j$(JOBS)
	./build-release/bench/bench_publish

clean:
	rm -rf $(BUILD) build-asan build-tsan build-release

fuzz:
	@scripts/fuzz.sh
