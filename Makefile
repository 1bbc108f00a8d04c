# divgpu: `make run` computes the diversity cache of the shipped poems;
# `make test` runs every test. Both install the Debian packages that are
# missing first (`make deps`, through sudo when not root); `make build` (and
# so `luarocks make` and `make install`) never installs system packages.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

# Cargo's build folder lives outside the checkout, so a fresh clone on the
# same machine (CI) reuses the build instead of redoing it.
CARGO_TARGET_DIR ?= $(HOME)/.cache/divgpu/target
export CARGO_TARGET_DIR

EMBEDDINGS ?= assets/embeddings/all-MiniLM-L6-v2/embeddings.json
CACHE ?= diversity_cache.json

# Debian 12 packages (`make deps` installs the missing ones): LuaJIT and its
# libraries, the Vulkan loader, Mesa's CPU Vulkan driver (lavapipe) and
# validation layer, and what shaderc's from-source build needs.
APT_PACKAGES := luajit lua-argparse lua-busted lua-dkjson libvulkan1 mesa-vulkan-drivers \
	vulkan-validationlayers cmake ninja-build g++ python3 python3-numpy pkg-config git fonts-dejavu-core \
	libshaderc-dev glslang-dev spirv-tools

# shaderc: Debian's static libraries when present (seconds to link), else
# shaderc-sys builds it from source (about 20 minutes on 2 cores).
# SHADERC=source forces the source build: Debian 12's shaderc (2023.2)
# predates GL_KHR_cooperative_matrix, so only that build carries the tensor
# cores' kernel (build.rs leaves it out, with a warning, and
# `divgpu info` says so). Debian's libshaderc.so names none of the glslang
# libraries it needs, so the link is spelled out here (cargo's `links`
# override of shaderc-sys's build script).
SHADERC_LIBDIR := /usr/lib/$(shell gcc -dumpmachine 2>/dev/null)
SHADERC_STATIC := shaderc_combined glslang MachineIndependent GenericCodeGen OGLCompiler OSDependent SPIRV SPIRV-Tools-opt SPIRV-Tools
SHADERC ?= $(if $(wildcard $(SHADERC_LIBDIR)/libshaderc_combined.a $(SHADERC_LIBDIR)/libOGLCompiler.a $(SHADERC_LIBDIR)/libSPIRV-Tools-opt.a),system,source)
# Deferred (=), so `make run` on a fresh machine sees what `make deps` installed.
shaderc_key = target.$(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p').shaderc
shaderc_libs = $(foreach l,$(SHADERC_STATIC),'static=$(l)',)'dylib=stdc++'
CARGO_SHADERC = $(if $(filter system,$(SHADERC)),--config "$(shaderc_key).rustc-link-search=['$(SHADERC_LIBDIR)']" --config "$(shaderc_key).rustc-link-lib=[$(shaderc_libs)]",--features shaderc-from-source)

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all run test deps build check-cargo clean fuzz fuzz-seeds fuzz-cmin build/fault/divgpu.so test-cluster

# Prerequisites in the order written: `deps` finishes before `build` starts.
.NOTPARALLEL:

all: build

deps: .deps-stamp
.deps-stamp: Makefile
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  $(SUDO) apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@touch $@

check-cargo:
	@command -v cargo >/dev/null || { echo "cargo not found: install Rust >= 1.80 with rustup (Debian 12's cargo is too old)" >&2; exit 1; }

build: check-cargo
	@echo "shaderc: $(SHADERC) (make build SHADERC=source|system)"
	@cargo build --release --locked $(CARGO_SHADERC) || { echo "cargo build failed; if a tool is missing (cmake, ninja, g++, python3, git), 'make deps' installs it on Debian 12" >&2; exit 1; }
	@mkdir -p build
	@# Copy then rename: a running divgpu keeps its mapping of the old file.
	@cp -f "$(CARGO_TARGET_DIR)/release/libdivgpu.so" build/divgpu.so.new && mv -f build/divgpu.so.new build/divgpu.so

run: deps build
	bin/divgpu run --embeddings $(EMBEDDINGS) --out $(CACHE)

# The fault-injection variant (tests only: divgpu.inject_fault) goes to
# build/fault/divgpu.so; it shares the dependency cache, so it costs one more
# compile of divgpu itself and its shaders, not of shaderc.
build/fault/divgpu.so: build
	cargo build --release --locked $(CARGO_SHADERC) --features fault-injection
	@mkdir -p build/fault
	@cp -f "$(CARGO_TARGET_DIR)/release/libdivgpu.so" build/fault/divgpu.so.new && mv -f build/fault/divgpu.so.new build/fault/divgpu.so
	@# Put the shipped variant back where `make build` copies it from.
	cargo build --release --locked $(CARGO_SHADERC)

test: deps build build/fault/divgpu.so
	cargo test --release --locked $(CARGO_SHADERC) --no-default-features --features gpu,plot --lib
	DIVGPU_VALIDATION=1 luajit tests/run_busted.lua
	DIVGPU_VALIDATION=1 luajit tests/run_busted.lua --run=faults
	DIVGPU_VALIDATION=1 luajit tests/run_busted.lua --run=faults tests/write_faults_spec.lua
	DIVGPU_VALIDATION=1 tests/cli_test.sh
	DIVGPU_VALIDATION=1 tests/habits_test.sh
	DIVGPU_VALIDATION=1 tests/safe_write_test.sh
	DIVGPU_VALIDATION=1 tests/trust_inputs_test.sh
	DIVGPU_VALIDATION=1 tests/binary_cache_test.sh
	tests/cache_memory_test.sh
	DIVGPU_VALIDATION=1 tests/numpy_reader_test.sh
	DIVGPU_VALIDATION=1 tests/soak_test.sh
	DIVGPU_VALIDATION=1 tests/install_test.sh
	tests/viewer_test.sh
	tests/links_test.sh
	tests/function_length_test.sh
	tests/import_cycles_test.sh
	tests/tree_test.sh
	tests/architecture_test.sh
	DIVGPU_VALIDATION=1 tests/cpu_method_test.sh
	DIVGPU_VALIDATION=1 tests/estimates_test.sh
	DIVGPU_VALIDATION=1 tests/interrupt_test.sh
	DIVGPU_VALIDATION=1 tests/trust_paths_test.sh
	DIVGPU_VALIDATION=1 tests/trust_soak_test.sh
	DIVGPU_VALIDATION=1 tests/toy_kernel_test.sh
	python3 bench/render_tables.py --check
	python3 bench/render_nogpu.py --check

# The peers' byte tests on the CPU, the campaign protocol's smoke call on
# lavapipe and the rendered tables' check (tests/peers_test.sh: it makes its
# own virtual environment with numpy and PyTorch); then every bench script on
# lavapipe, on tables of a few hundred items (tests/peers_bench_smoke.sh: the
# device campaigns as their SMALL=1 dry runs; its header names the one it
# cannot run here and why).
test-peers: deps build
	tests/peers_test.sh
	DIVGPU_VALIDATION=1 tests/peers_bench_smoke.sh

# A single-node Slurm on localhost runs a sharded job (a four-task array, then
# the merge) through deploy/slurm/ and checks the merged cache against a single
# run; tests/slurm_test.sh installs slurm-wlm and munge when missing.
test-cluster: deps build
	DIVGPU_VALIDATION=1 tests/slurm_test.sh

# The coverage-guided fuzzers (cargo-fuzz, libFuzzer), one target at a time
# for FUZZ_SECONDS each. New inputs go to fuzz/work/ (not kept); `make
# fuzz-cmin` then folds them, with the seeds of fuzz/make_seeds.sh, into the
# kept corpus fuzz/corpus/<target>/ by a set-cover merge on edge coverage (the
# smallest set of files reaching the same edges; the kept corpus stays under
# the 2 MB that tests/tree_test.sh allows), which `make test` replays on
# stable Rust. The machine's one toolchain is stable: RUSTC_BOOTSTRAP lets
# cargo-fuzz's -Z flags through, and --sanitizer none because stable has no
# AddressSanitizer runtime (the readers are safe Rust; libFuzzer still finds
# panics, aborts, timeouts and runaway allocations).
FUZZ_SECONDS ?= 600
FUZZ_TARGETS := embeddings_json cache fp16 npy binary
FUZZ := RUSTC_BOOTSTRAP=1 cargo fuzz
FUZZ_FLAGS := --sanitizer none -O

fuzz: check-cargo
	@command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz not found: cargo install cargo-fuzz" >&2; exit 1; }
	$(FUZZ) build $(FUZZ_FLAGS)
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p fuzz/work/$$t fuzz/corpus/$$t; \
	  $(FUZZ) run $(FUZZ_FLAGS) $$t fuzz/work/$$t fuzz/corpus/$$t -- -dict=fuzz/json.dict \
	    -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -print_final_stats=1; \
	done
	$(MAKE) fuzz-cmin

fuzz-seeds: build
	fuzz/make_seeds.sh

fuzz-cmin: check-cargo
	@command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz not found: cargo install cargo-fuzz" >&2; exit 1; }
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p fuzz/work/$$t fuzz/seeds/$$t; \
	  cp -n fuzz/work/$$t/* fuzz/seeds/$$t/* fuzz/corpus/$$t/ 2>/dev/null || true; \
	  $(FUZZ) cmin $(FUZZ_FLAGS) $$t fuzz/corpus/$$t -- -set_cover_merge=1 -use_counters=0 -use_value_profile=0; \
	done

clean:
	rm -rf build .deps-stamp

# Install like a Lua module, the checkout not needed afterwards:
#   $(LIBDIR)/divgpu.so            the native module (require "divgpu")
#   $(LUADIR)/divgpu/*.lua         the driver and CLI modules, and installed.lua,
#                                  which records $(DATADIR) for divgpu.data
#   $(BINDIR)/divgpu               the launcher (finds ../share/lua/5.1, ../lib/lua/5.1)
#   $(DATADIR)/embeddings/         the shipped poems, the CLI's default table
# The shaders need nothing at run time: build.rs embeds the SPIR-V and the
# shaders/include files. DESTDIR is prepended to every path but not recorded.
# `luarocks make` runs this target through divgpu-scm-1.rockspec, with
# PREFIX, LUADIR, LIBDIR and BINDIR in its rock folder.
PREFIX ?= /usr/local
LUA_VERSION ?= 5.1
LUADIR ?= $(PREFIX)/share/lua/$(LUA_VERSION)
LIBDIR ?= $(PREFIX)/lib/lua/$(LUA_VERSION)
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share/divgpu

.PHONY: install uninstall
install: build
	install -d "$(DESTDIR)$(LIBDIR)" "$(DESTDIR)$(LUADIR)/divgpu" "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(DATADIR)"
	install -m 0755 build/divgpu.so "$(DESTDIR)$(LIBDIR)/divgpu.so"
	cd lua && find divgpu -name '*.lua' ! -name installed.lua | while read -r f; do \
	  install -D -m 0644 "$$f" "$(DESTDIR)$(LUADIR)/$$f"; done
	printf -- '-- Written by make install: where this installation keeps its data (divgpu.data).\nreturn { data_dir = [==[%s]==] }\n' \
	  "$(abspath $(DATADIR))" >"$(DESTDIR)$(LUADIR)/divgpu/installed.lua"
	install -m 0755 bin/divgpu "$(DESTDIR)$(BINDIR)/divgpu"
	rm -rf "$(DESTDIR)$(DATADIR)/embeddings"
	cp -R assets/embeddings "$(DESTDIR)$(DATADIR)/embeddings"
	install -m 0644 assets/README.md "$(DESTDIR)$(DATADIR)/README.md"

uninstall:
	rm -f "$(DESTDIR)$(LIBDIR)/divgpu.so" "$(DESTDIR)$(BINDIR)/divgpu"
	rm -rf "$(DESTDIR)$(LUADIR)/divgpu" "$(DESTDIR)$(DATADIR)"
