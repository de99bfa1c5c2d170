# The two commands of README.md. Both install what is missing first (scripts/install-deps.sh).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: deps configure build demo test bench clean format

deps:
	bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The demo needs only the `tessera` binary and the libraries under it.
demo: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target tessera
	bash scripts/demo.sh $(BUILD_DIR)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

bench: build
	bash bench/run_all.sh $(BUILD_DIR)

format:
	find src tests bench examples -name '*.h' -o -name '*.cpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
