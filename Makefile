# external-ip: build, test, demo, install. Every target runs on a fresh
# Debian machine as root; `deps` installs what the tests need.

GO      ?= go
BIN     := bin
PLUGIN  := $(BIN)/external-ip
CNIBIN  ?= /opt/cni/bin
# Each fuzz target runs this many inputs in `make test` (about 10 s each on
# 2 cores); the checked-in corpus runs always. Counts, not durations: a
# duration races Go's fuzz coordinator at its deadline and fails a clean run
# with "context deadline exceeded" (golang/go#75804), as CI saw once.
FUZZ_LOAD     ?= 400000x
FUZZ_REQUESTS ?= 100000x
FUZZ_STATE    ?= 1500x
FUZZ_CONF     ?= 30000x
FUZZ_ENCODE   ?= 50000x
FUZZ_DECODE   ?= 100000x
# What `external-ip version` and the image's labels say.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The name the DaemonSet uses; the version is in the image's labels.
IMAGE    ?= localhost/external-ip:latest

.PHONY: all build deps test unit fuzz demo install bench e2e image clean

all: build

# Static, as the containernetworking/plugins releases are: a dynamically
# linked binary costs more at every start (docs/performance.md).
# bin/external-ip-node is the same program with Prometheus metrics and the
# Kubernetes client (build tags metrics and kubernetes), for the node process
# only: client_golang's and client-go's package inits would cost every CNI
# call milliseconds (docs/observe.md, docs/pools.md).
LDFLAGS = -X main.buildVersion=$(VERSION) -X main.buildRevision=$(REVISION)
build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(PLUGIN) ./plugins/external-ip
	CGO_ENABLED=0 $(GO) build -tags metrics,kubernetes -ldflags "$(LDFLAGS)" -o $(BIN)/external-ip-node ./plugins/external-ip

# deps installs the system tools the root tests use (iproute2, ping, ...).
deps:
	@bash scripts/deps.sh

# test runs every test, the root ones in test/netns included, with -race,
# then each fuzz target briefly. test/netns alone takes about 10 minutes
# with -race on a busy 2-core machine: go test's default timeout (10m) is
# too short for it.
test: deps build
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...
	$(GO) test -race -count=1 -tags metrics,kubernetes ./plugins/external-ip/
	$(MAKE) fuzz

# A short minimize budget: on 2 cores the default stalls the run for long.
FUZZFLAGS = -run='^$$' -fuzzminimizetime=200x
fuzz:
	$(GO) test $(FUZZFLAGS) -fuzztime=$(FUZZ_LOAD) -fuzz='^FuzzLoad$$' ./pkg/config/
	$(GO) test $(FUZZFLAGS) -fuzztime=$(FUZZ_REQUESTS) -fuzz='^FuzzRequests$$' ./pkg/config/
	$(GO) test $(FUZZFLAGS) -fuzztime=$(FUZZ_STATE) -fuzz='^FuzzStateFiles$$' ./pkg/assigner/
	$(GO) test $(FUZZFLAGS) -fuzztime=$(FUZZ_ENCODE) -fuzz='^FuzzStateEncodingIsEncodingJSONs$$' ./pkg/store/
	$(GO) test $(FUZZFLAGS) -fuzztime=$(FUZZ_ENCODE) -fuzz='^FuzzStepDataIsCopiedAsEncodingJSONCopiesIt$$' ./pkg/store/
	$(GO) test $(FUZZFLAGS) -fuzztime=$(FUZZ_DECODE) -fuzz='^FuzzDecoderIsEncodingJSON$$' ./pkg/plainjson/
	$(GO) test $(FUZZFLAGS) -fuzztime=$(FUZZ_DECODE) -fuzz='^FuzzStateDecodingIsEncodingJSONs$$' ./pkg/store/
	$(GO) test $(FUZZFLAGS) -fuzztime=$(FUZZ_DECODE) -fuzz='^FuzzNetConfDecodingIsEncodingJSONs$$' ./pkg/config/
	$(GO) test $(FUZZFLAGS) -fuzztime=$(FUZZ_DECODE) -fuzz='^FuzzPrevResultDecodingIsTheLibrarys$$' ./pkg/config/
	$(GO) test $(FUZZFLAGS) -fuzztime=$(FUZZ_CONF) -fuzz='^FuzzChainedListLoadsInLibcni$$' ./pkg/install/

demo: deps
	@bash scripts/demo.sh

# bench interleaves external-ip's ADD and DEL (steering off and on, with
# attachments held) with the exec floor, host-local and portmap, prints the
# tables and writes docs/benchmark.svg and docs/benchmark.csv (and
# docs/benchmark-pools-standby.*, a second pass); docs/performance.md
# is written from them by hand. As root, on a quiet machine. BENCHFLAGS adds
# the profiling hooks (-strace -perf -inittrace) or -quick.
bench: deps
	$(GO) run ./test/bench -out docs $(BENCHFLAGS)

# e2e runs real runtimes (containerd + crictl, podman, cnitool) with the
# plugin in their chains, and the installer image, inside namespaces; it
# installs what it needs.
e2e: build image
	PLUGIN=$(CURDIR)/$(PLUGIN) bash test/e2e/run-all.sh

# image builds the installer image FROM scratch with the static binary
# (buildah from Debian's package) as an OCI archive: bin/external-ip-image.tar.
image: build
	bash scripts/image.sh $(PLUGIN) $(IMAGE) $(VERSION) $(REVISION) $(BIN)/external-ip-image.tar

install: build
	install -D -m 0755 $(PLUGIN) $(CNIBIN)/external-ip

clean:
	rm -rf $(BIN)
