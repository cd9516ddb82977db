# distrl — one-command build. `make demo` and `make test` install what they need first.
# LIBTORCH=debian (default): Debian's libtorch-dev 1.13 (CPU). LIBTORCH=wheel: the official
# LibTorch 2.x inside PyPI's torch wheel (CUDA 13), pinned below, fetched by `make libtorch-wheel`
# into a cache outside the source tree and built in its own directory, build-torch2.
LIBTORCH ?= debian
TORCH_WHEEL_VERSION := 2.15.0
TORCH_CACHE ?= $(HOME)/.cache/distrl/torch-$(TORCH_WHEEL_VERSION)
ifeq ($(LIBTORCH),wheel)
BUILD_DIR ?= build-torch2
CMAKE_ARGS += -DCMAKE_PREFIX_PATH=$(TORCH_CACHE)/torch
TORCH_PREREQ := libtorch-wheel
TORCH_PREFIX := ;$(TORCH_CACHE)/torch
else ifeq ($(LIBTORCH),debian)
TORCH_PREREQ :=
else
$(error LIBTORCH is '$(LIBTORCH)': use debian (Debian's 1.13) or wheel (PyPI's torch $(TORCH_WHEEL_VERSION)))
endif
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
# Debian bookworm packages the project needs (build, run, demo, tests).
DEPS := build-essential cmake ninja-build pkg-config ccache \
        libtorch-dev libopenblas0-pthread \
        libzmq3-dev cppzmq-dev libmsgpack-cxx-dev \
        libbox2d-dev libgif-dev libyaml-cpp-dev zlib1g-dev libcli11-dev \
        libgtest-dev libgmock-dev gnuplot-nox dataset-fashion-mnist iproute2 python3-venv unzip clang-format-14
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps reference-venv libtorch-wheel consumer configure build test test-unit test-integration test-asan fuzz fuzz-seeds demo bench clean format format-check tidy

all: build

# Idempotent: when every package is installed it costs one dpkg-query.
define install_packages
	@missing=""; for p in $(1); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "make $@: installing$$missing"; \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "make $@: all $(words $(1)) packages present"; fi
endef

deps:
	$(call install_packages,$(DEPS))

# The wheel's LibTorch, as it sits in site-packages: torch/{lib,include,share} beside the CUDA
# libraries libtorch_cuda.so finds through its RPATH ($$ORIGIN/../../nvidia/...) and the toolkit
# does not ship (cuSPARSELt, NVSHMEM, cuFile) or ships older than the wheel was built with (NCCL:
# the toolkit has 2.28, the wheel pins 2.30.7). Python code, triton and the rest of the wheel
# are not unpacked. Pinned: torch $(TORCH_WHEEL_VERSION) and the versions its metadata names.
TORCH_WHEELS := torch==$(TORCH_WHEEL_VERSION) nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.7.2 \
                nvidia-cufile==1.17.1.22 nvidia-nccl-cu13==2.30.7
libtorch-wheel:
	@if [ -f $(TORCH_CACHE)/unpacked ]; then \
	    echo "make $@: $(TORCH_CACHE) ready"; \
	else \
	    echo "make $@: fetching $(TORCH_WHEELS) into $(TORCH_CACHE)" && \
	    mkdir -p $(TORCH_CACHE)/wheels && \
	    ( [ -x $(TORCH_CACHE)/pip/bin/pip ] || /usr/bin/python3 -m venv $(TORCH_CACHE)/pip ) && \
	    $(TORCH_CACHE)/pip/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
	        -d $(TORCH_CACHE)/wheels $(TORCH_WHEELS) && \
	    cd $(TORCH_CACHE) && unzip -q -o wheels/torch-$(TORCH_WHEEL_VERSION)-*.whl 'torch/lib/*' 'torch/include/*' 'torch/share/*' && \
	    for w in wheels/nvidia_*.whl; do unzip -q -o $$w 'nvidia/*'; done && \
	    echo "make $@: downloaded $$(du -sh wheels | cut -f1) of wheels (deleted now), unpacked" \
	        "$$(du -sh torch | cut -f1) of LibTorch and $$(du -sh nvidia | cut -f1) of CUDA libraries" && \
	    rm -rf wheels && touch unpacked; \
	fi

$(BUILD_DIR)/build.ninja: $(TORCH_PREREQ)
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

configure: $(BUILD_DIR)/build.ninja

# BUILD_TARGETS empty: everything (tests, benchmarks, examples); `make demo` names only what it runs.
BUILD_TARGETS ?=
build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) $(if $(BUILD_TARGETS),--target $(BUILD_TARGETS))

# What some tests compare against, from PyPI into a venv outside the source tree, pinned:
# TensorBoard's own event reader and Gymnasium's environments ([box2d]: the pybox2d 2.3.10 and
# pygame-ce wheels, for BipedalWalker). Without PyPI those tests skip, saying so.
REFERENCE_VENV ?= $(HOME)/.cache/distrl/reference-venv
REFERENCE_PIP := tensorboard==2.21.0 'gymnasium[box2d]==1.4.0'
reference-venv:
	@if $(REFERENCE_VENV)/bin/python -c "import tensorboard, gymnasium, Box2D" 2>/dev/null; then \
	    echo "make $@: $(REFERENCE_VENV) ready"; \
	else \
	    echo "make $@: installing $(REFERENCE_PIP) into $(REFERENCE_VENV)"; \
	    (/usr/bin/python3 -m venv $(REFERENCE_VENV) && $(REFERENCE_VENV)/bin/pip install -q $(REFERENCE_PIP)) || \
	    echo "make $@: could not install $(REFERENCE_PIP) (no network?): the tests that read event files with it skip"; \
	fi

test: deps
	$(MAKE) build reference-venv
	cd $(BUILD_DIR) && DISTRL_REFERENCE_PYTHON=$(REFERENCE_VENV)/bin/python ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)
	$(MAKE) consumer

# find_package(distrl) as a user sees it: install into BUILD_DIR/install, then configure, build
# and run examples/consumer (its own CMake project) against that tree, and build the environment
# plugin example (examples/env_plugin) the same way and train on it with the installed tools.
consumer: build
	cmake --install $(BUILD_DIR) --prefix $(CURDIR)/$(BUILD_DIR)/install > /dev/null
	cmake -S examples/consumer -B $(BUILD_DIR)/consumer -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    "-DCMAKE_PREFIX_PATH=$(CURDIR)/$(BUILD_DIR)/install$(TORCH_PREFIX)" > /dev/null
	cmake --build $(BUILD_DIR)/consumer
	$(BUILD_DIR)/consumer/consumer
	cmake -S examples/env_plugin -B $(BUILD_DIR)/env_plugin -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    "-DCMAKE_PREFIX_PATH=$(CURDIR)/$(BUILD_DIR)/install$(TORCH_PREFIX)" > /dev/null
	cmake --build $(BUILD_DIR)/env_plugin
	$(BUILD_DIR)/install/bin/distrl-launch --force --config $(BUILD_DIR)/install/share/distrl/configs/cartpole_ppo.yaml \
	    env.plugin=$(BUILD_DIR)/env_plugin/libcorridor_env.so env.name=Corridor-v0 learner.rounds=30 \
	    learner.target_reward=0.35 \
	    run.out_dir=$(BUILD_DIR)/env_plugin/run

test-unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L unit

test-integration: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L integration

# The house format (.clang-format, clang-format 14 from Debian) over every C++ file git tracks:
# `make format` applies it; `make format-check` (CI, before anything is built) fails naming each
# file that differs, so a change that is not formatted never lands.
CXX_FILES = $(shell git ls-files '*.cpp' '*.h')
format: deps
	clang-format-14 -i $(CXX_FILES)

format-check: deps
	@log=$$(mktemp); \
	if clang-format-14 --dry-run --Werror $(CXX_FILES) 2>$$log; then \
	    echo "make $@: $(words $(CXX_FILES)) files formatted"; rm -f $$log; \
	else \
	    echo "make $@: not formatted as .clang-format says (\`make format\` fixes them):"; \
	    grep -o '^[^:]*:[0-9]*:[0-9]*: error' $$log | cut -d: -f1,2 | sort -u -t: -k1,1 | head -50; \
	    rm -f $$log; exit 1; \
	fi

# clang-tidy (.clang-tidy) over the C++ files changed since BASE (default: the upstream branch,
# else HEAD~1), with the build's compile_commands.json. Not in CI: a full run parses LibTorch's
# headers for every file (minutes on 2 cores).
BASE ?= $(shell git rev-parse -q --verify @{upstream} 2>/dev/null || echo HEAD~1)
tidy: configure
	$(call install_packages,clang-tidy-14)
	@files=$$(git diff --name-only --diff-filter=AM $(BASE) -- '*.cpp'); \
	if [ -z "$$files" ]; then echo "make tidy: no C++ source changed since $(BASE)"; \
	else clang-tidy-14 -p $(BUILD_DIR) --quiet $$files; fi

# The main job: an agent and 4 observer processes learn CartPole-v1 with batched action
# serving; ends with "Solved" or the reason it stopped. DEMO_ARGS overrides config keys.
# Builds only the three tools it runs and the libraries they link (not the tests). --force: a
# second demo moves the first one's outputs aside into runs/cartpole/previous/ (a demo that is
# still running is never touched: the second is refused).
DEMO_CONFIG ?= configs/cartpole.yaml
DEMO_ARGS ?=
DEMO_TARGETS ?= distrl-launch distrl-agent distrl-observer
demo: deps
	$(MAKE) build BUILD_TARGETS="$(DEMO_TARGETS)"
	$(BUILD_DIR)/bin/distrl-launch --config $(DEMO_CONFIG) --force $(DEMO_ARGS)

# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (its own build dir;
# every tool the tests start is instrumented too). Timeouts are scaled for the slowdown.
ASAN_DIR ?= build-asan
test-asan: deps
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDISTRL_SANITIZE=address,undefined \
	    -DDISTRL_TEST_TIMEOUT_SCALE=3 $(CMAKE_ARGS)
	cmake --build $(ASAN_DIR) -j $(JOBS)
	cd $(ASAN_DIR) && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# libFuzzer (clang 14): builds every target under ASan + UBSan in $(FUZZ_DIR) and runs each
# for FUZZ_SECONDS, FUZZ_JOBS at a time, from the seeds in tests/fuzz/corpus/. A crash input is
# saved in $(FUZZ_DIR)/findings/ and fails the run. `make fuzz FUZZ_SECONDS=600` is the long run.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= $(JOBS)
FUZZ_TARGETS ?= rpc store pg settings idx ring
FUZZ_DEPS := clang-14 libclang-rt-14-dev
fuzz: deps
	$(call install_packages,$(FUZZ_DEPS))
	cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
	    -DDISTRL_FUZZ=ON -DDISTRL_PCH=OFF
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target fuzz
	tests/fuzz/run_fuzzers.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS)

# Rewrites the seed corpora in tests/fuzz/corpus/ (after a wire format change).
fuzz-seeds: build
	$(BUILD_DIR)/bin/distrl-fuzz-seeds tests/fuzz/corpus

bench: build
	$(BUILD_DIR)/bin/distrl-bench rpc
	$(BUILD_DIR)/bin/distrl-bench rl
	$(BUILD_DIR)/bin/distrl-bench allreduce
	$(BUILD_DIR)/bin/distrl-bench ddp
	$(BUILD_DIR)/bin/distrl-bench env

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(FUZZ_DIR)
