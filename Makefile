# SPDX-License-Identifier: Apache-2.0
# Thin wrapper over CMake that gives README.md its two commands.
#   make run   - install what is missing, build, run keylessd on its
#                embedded default (dev PKI + demo keys in ./state)
#   make test  - install what is missing, build, run every test (CTest)
# More: make asan, make tsan, make fuzz, make format, make clean; hardening
# (docs/SECURITY.md "Verified by"): make valgrind, make fuzz-long,
# make overload, make soak (below)

BUILD    ?= build
JOBS     ?= $(shell nproc)
CMAKE    ?= cmake
# No test is retried: a test that fails once is a bug to find (make
# flaky-hunt). Extra ctest arguments, e.g. CTEST_ARGS="-R router".
CTEST_ARGS ?=
FUZZ_SECONDS ?= 30

.PHONY: all deps build run test asan tsan fuzz fuzz-build format format-check clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@$(CMAKE) --build $(BUILD) -j $(JOBS) -- --no-print-directory

# Builds only what it runs (keylessd and keyless-cli, whose commands it
# prints), not the ~100 test programs.
run: deps
	@$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@$(CMAKE) --build $(BUILD) -j $(JOBS) --target keylessd keyless-cli \
	    -- --no-print-directory
	@bash scripts/dev-run.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps
	@$(CMAKE) -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug \
	    -DKL_SANITIZE=address,undefined >/dev/null
	@$(CMAKE) --build build-asan -j $(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# The suite under ThreadSanitizer, built with clang (whose runtime ships in
# libclang-rt-dev, installed by scripts/install-deps.sh). die_after_fork=0:
# the fork-safety tests start threads in a forked child, which TSan
# otherwise refuses.
tsan: deps
	@CC=clang $(CMAKE) -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug \
	    -DKL_SANITIZE=thread >/dev/null
	@$(CMAKE) --build build-tsan -j $(JOBS)
	@cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 \
	    die_after_fork=0 suppressions=$(CURDIR)/tests/sanitizers/tsan.supp" \
	    ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

fuzz-build: deps
	@CC=clang $(CMAKE) -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DKL_FUZZ=ON -DKL_TESTS=OFF -DKL_SANITIZE=address,undefined >/dev/null
	@$(CMAKE) --build build-fuzz -j $(JOBS)

# Runs every fuzz target for FUZZ_SECONDS each on its checked-in corpus.
fuzz: fuzz-build
	@bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

# The long run: every target for FUZZ_LONG_SECONDS, one table of
# executions, corpus growth and findings for bench/RESULTS.md.
FUZZ_LONG_SECONDS ?= 600
.PHONY: fuzz-long
fuzz-long: fuzz-build
	@bash fuzz/long-run.sh build-fuzz $(FUZZ_LONG_SECONDS)

# Flaky-test hunt: the suite RUNS times without retries, LOAD CPU hogs
# beside it (scripts/flaky-hunt.sh; a table of failures per test).
RUNS ?= 5
LOAD ?= 0
.PHONY: flaky-hunt
flaky-hunt: build
	@bash scripts/flaky-hunt.sh -n $(RUNS) -l $(LOAD) $(BUILD)

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	@clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz

# ---- Hardening ----
#   make valgrind             named integration tests, keylessd under memcheck
#   make overload             test_overload with 30 s of 3x overload
#   make soak [SOAK_SECONDS=600]  the soak test, long
#   make fleet-outage [FLEET_OUTAGE_SECONDS=30]  test_fleet_routing with etcd
#                             down that long under load (the suite: 6 s)
#   make fleet-sim [FLEET_SIM_ARGS=...]  the fleet simulation, 50 keylessd in
#                             5 regions (bench/fleet-sim, docs/FLEET.md); root
SOAK_SECONDS ?= 600
OVERLOAD_SECONDS ?= 30
FLEET_OUTAGE_SECONDS ?= 30

.PHONY: valgrind overload soak fleet-outage fleet-sim
FLEET_SIM_ARGS ?=

valgrind: build
	@bash tests/valgrind/run.sh $(BUILD)

# Run directly (not through CTest, whose 300 s timeout would cut them).
KL_RUN_ENV = KL_SRC_DIR=$(CURDIR) KL_BIN_DIR=$(abspath $(BUILD)) \
	KL_VECTORS=$(CURDIR)/tests/vectors

overload: build
	@$(KL_RUN_ENV) KL_OVERLOAD_SECONDS=$(OVERLOAD_SECONDS) \
	    $(BUILD)/test_overload

soak: build
	@$(KL_RUN_ENV) KL_SOAK_SECONDS=$(SOAK_SECONDS) $(BUILD)/test_soak

fleet-outage: build
	@$(KL_RUN_ENV) KL_FLEET_OUTAGE_SECONDS=$(FLEET_OUTAGE_SECONDS) \
	    $(BUILD)/test_fleet_routing

# Not in CI: about 4 minutes and 2 GB; builds only what it runs.
fleet-sim: deps
	@bash bench/fleet-sim/run.sh $(BUILD) $(FLEET_SIM_ARGS)

# ---- Packaging: install, Debian package, packaging tests ----
#   make install [PREFIX=/usr/local] [DESTDIR=/tmp/stage]
#   make deb              -> build-deb/keylessd_<version>_<arch>.deb, and
#                         libkeyless0 + libkeyless-dev (the client library)
#   make test-packaging   unit verification, readiness notification, and the
#                         package installed and removed (root only)
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: install deb test-packaging

install: build
	@DESTDIR="$(DESTDIR)" $(CMAKE) --install $(BUILD) --prefix "$(PREFIX)"

deb: deps
	@bash packaging/build-deb.sh build-deb

test-packaging: build
	@KL_BIN_DIR="$(abspath $(BUILD))" bash tests/packaging/run.sh
