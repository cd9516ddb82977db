# distrl — one-command build. `make demo` and `make test` install what they need first.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
# Debian bookworm packages the project needs (build, run, demo, tests).
DEPS := build-essential cmake ninja-build pkg-config ccache \
        libtorch-dev libopenblas0-pthread \
        libzmq3-dev cppzmq-dev libmsgpack-cxx-dev \
        libbox2d-dev libgif-dev libyaml-cpp-dev zlib1g-dev libcli11-dev \
        libgtest-dev libgmock-dev gnuplot-nox dataset-fashion-mnist
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps configure build test test-unit test-integration demo bench clean

all: build

# Idempotent: when every package is installed it costs one dpkg-query.
deps:
	@missing=""; for p in $(DEPS); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "make deps: installing$$missing"; \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "make deps: all $(words $(DEPS)) packages present"; fi

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

configure: $(BUILD_DIR)/build.ninja

build: configure
	CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime \
	    cmake --build $(BUILD_DIR) -j $(JOBS)

test: deps
	$(MAKE) build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

test-unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L unit

test-integration: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L integration

# The main job: an agent and 4 observer processes learn CartPole-v1 with batched action
# serving; ends with "Solved" or the reason it stopped. DEMO_ARGS overrides config keys.
DEMO_CONFIG ?= configs/cartpole.yaml
DEMO_ARGS ?=
demo: deps
	$(MAKE) build
	$(BUILD_DIR)/bin/distrl-launch --config $(DEMO_CONFIG) $(DEMO_ARGS)

bench: build
	$(BUILD_DIR)/bin/distrl-bench rpc
	$(BUILD_DIR)/bin/distrl-bench rl
	$(BUILD_DIR)/bin/distrl-bench allreduce
	$(BUILD_DIR)/bin/distrl-bench ddp
	$(BUILD_DIR)/bin/distrl-bench env

clean:
	rm -rf $(BUILD_DIR)
