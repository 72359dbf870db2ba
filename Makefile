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
# The README's main command: on a machine without a GPU, --device auto runs
# the cpu backend on llama-tiny.
RUN_ARGS ?= --batch-size 1,4 --input-len 64 --output-len 16

.PHONY: all build test vet lint fmt run fuzz bundle clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/stepbench

vet:
	$(GO) vet ./...

# Every test; GPU tests skip with a message where there is no GPU.
test: vet
	$(GO) test -count=1 ./...

lint: vet
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
	$(GO) test ./bench -run '^$$' -fuzz FuzzParseReport -fuzztime $(FUZZTIME)
	$(GO) test ./bench -run '^$$' -fuzz FuzzParseKernelShape -fuzztime $(FUZZTIME)
	$(GO) test ./bench -run '^$$' -fuzz FuzzPercentileWithinBoundsAndMonotone -fuzztime $(FUZZTIME)
	$(GO) test ./kernels -run '^$$' -fuzz FuzzParsePtxasReport -fuzztime $(FUZZTIME)
	$(GO) test ./cuda -run '^$$' -fuzz FuzzCudaDirVersion -fuzztime $(FUZZTIME)

# The device bundle: what one run on a GPU machine needs (it has no Go):
# the binary and the check script. There: OUT=... bash dist/bundle/device-check.sh
bundle:
	mkdir -p dist/bundle/bin
	$(GO) build -ldflags "$(LDFLAGS)" -o dist/bundle/bin/stepbench ./cmd/stepbench
	cp scripts/device-check.sh scripts/hf-check.py dist/bundle/
	@! ldd dist/bundle/bin/stepbench | grep -Ei 'cuda|nvrtc|cublas' || { echo "the binary links a CUDA library"; exit 1; }

clean:
	rm -rf bin dist
