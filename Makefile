# cnperf — see README.md. `make demo` runs the main job, `make test` the tests.

GO       ?= go
BIN      := bin/cnperf
PKGS     := ./...
# The tests' wall-clock bound; CI's whole run must stay under 90 minutes.
TEST_TIMEOUT ?= 30m

.PHONY: all build demo test fuzz test-release test-k8s test-k8s-cilium test-k8s-compare test-deps vet fmt-check bench-probes bench-server bench-lab bench-answers bench-idle bench-chaos bench-matrixsim clean

all: build

# The commit `cnperf version` prints when the build carries no VCS stamp
# (GOFLAGS=-buildvcs=false, or a git worktree go does not stamp from).
COMMIT   := $(shell git rev-parse HEAD 2>/dev/null)$(if $(shell git status --porcelain 2>/dev/null | head -c1),+modified)
# The release tag at HEAD (none elsewhere: `cnperf version` then says
# (devel) and `cnperf k8s deploy` wants --image or --push); a modified
# checkout is no release.
VERSION  := $(if $(findstring +modified,$(COMMIT)),,$(shell git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null))
# -s -w: no symbol table or DWARF (93 MB -> 65 MB; stack traces keep their
# function names and lines, which come from the pclntab).
LDFLAGS  := -s -w -X github.com/cnperf/cnperf/internal/cli.fallbackCommit=$(COMMIT) $(if $(VERSION),-X github.com/cnperf/cnperf/internal/cli.version=$(VERSION))

build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/cnperf

# The main job: the baseline suite on a 2-node lab (needs root).
demo: build
	./scripts/demo.sh

test-deps:
	./scripts/install-test-deps.sh

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# All tests with the race detector, against SQLite and a throwaway
# PostgreSQL and MariaDB started for the run; then, on its own so that a cold
# Kubernetes build does not compete with the other tests for the CPUs,
# the real two-node cluster (test-k8s). Between them every fuzz target runs
# for FUZZTIME (scripts/fuzz.sh).
FUZZTIME ?= 10s
test: test-deps fmt-check vet build
	CNPERF_HELM="$$(./test/helm/build.sh || echo)" ./scripts/run-tests.sh $(TEST_TIMEOUT) $(PKGS)
	./scripts/fuzz.sh $(FUZZTIME)
	$(MAKE) --no-print-directory test-release
	$(MAKE) --no-print-directory test-k8s

# The release a tag produces (.goreleaser.yaml), published nowhere (about a
# minute warm): goreleaser
# v2, built from its Go module on first use (cached in /var/cache/cnperf-tools;
# the test skips, saying so, when it cannot be built), runs on a copy of the
# tree tagged v1.2.3; test/release checks every archive, checksums.txt, the
# krew manifest's sha256 values and the binaries (stripped, static, the tag).
test-release:
	CNPERF_GORELEASER="$$(./test/release/build-goreleaser.sh || echo)" $(GO) test -count=1 -timeout 30m -v -run TestRelease ./test/release/

# Every Go fuzz target for FUZZTIME each (part of make test).
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# cnperf beside iperf3 and sockperf over a veth between two namespaces,
# unpinned and pinned, rr also with client and server sharing CPU 0 (needs
# root); serialised with other benchmarks.
# BENCH_PROBES_FLAGS passes flags through, e.g. "-runs 3 -only rr", or
# "-iperf3 /path/to/iperf3" to compare with another iperf3 than the PATH's.
bench-probes: build test-deps
	flock /tmp/cnperf-bench.lock $(GO) run ./bench/probes -cnperf $(BIN) $(BENCH_PROBES_FLAGS)

# Simulated agents (10,000 by default) against one server on SQLite, on
# sessions (the agent's session client) and then polling (v1 style), then
# a 50,000-agent session hold on server replicas on a throwaway
# PostgreSQL (scripts/pg-test.sh; hence test-deps) with the agents spread
# over simulator processes, as many as the open-file limit needs, and
# matrix rounds dispatched over the sessions meanwhile; prints the
# targets of #12 side by side with the machine's load, and fails when a
# held agent is lost or marked offline. Holds the machine-wide benchmark
# lock. BENCH_SERVER_FLAGS passes flags through, e.g.
# BENCH_SERVER_FLAGS="-agents 2000 -measure 30s -mode sessions -hold 0",
# "-mode hold" for the hold alone, "-mode hold -hold 100000 -hold-ramp 10m".
bench-server: build test-deps
	flock /tmp/cnperf-bench.lock $(GO) run ./bench/server -cnperf $(BIN) $(BENCH_SERVER_FLAGS)

# The matrix's sampled plan over 1,000 simulated nodes in compressed
# time (bench/matrixsim/README.md). BENCH_MATRIXSIM_FLAGS passes flags.
bench-matrixsim:
	flock /tmp/cnperf-bench.lock $(GO) run ./bench/matrixsim $(BENCH_MATRIXSIM_FLAGS)

# A run of 1,000 tasks with 8 MB raw outputs each, stored and read back
# through the API, the CLI and the dashboard; prints the server's peak RSS
# (target < 300 MB). Writes about 8 GB to the temp dir and takes minutes.
bench-answers: build
	flock /tmp/cnperf-bench.lock $(GO) run ./bench/answers -cnperf $(BIN) $(BENCH_ANSWERS_FLAGS)

# Lab up + down of 2x2 and 32x4 on both backends against the targets
# (< 2 s, < 30 s), then 160 agents online (< 5 s); then the measuring
# tests with their figures asserted (CNPERF_FIGURES=strict: the rates,
# shares, latencies, ratios and verdicts that make test only logs; see
# internal/figure). Needs root. Serialised with other benchmarks.
# BENCH_LAB_FLAGS passes flags through, e.g. "--control-plane-only --repeat 3".
FIGURE_PKGS := ./internal/suite/... ./internal/probe/... ./internal/lab/ ./internal/server/
bench-lab:
	flock /tmp/cnperf-bench.lock $(GO) run ./bench/lab $(BENCH_LAB_FLAGS)
	CNPERF_FIGURES=strict flock /tmp/cnperf-bench.lock $(GO) test -count=1 -p 1 -timeout $(TEST_TIMEOUT) $(FIGURE_PKGS)

# An idle agent (its session, keep-alives, responder and STAMP reflector,
# on loopback beside a server on SQLite) measured for 60 s: its CPU ticks
# and RSS beside the targets (at most 0.05 % of a core, 25 MB). Serialised
# with other benchmarks. BENCH_IDLE_FLAGS passes flags through, e.g.
# "-measure 5m".
bench-idle: build
	flock /tmp/cnperf-bench.lock $(GO) run ./bench/idle -cnperf $(BIN) $(BENCH_IDLE_FLAGS)

# A run of 1,000 short tasks between 8 agents, each in its own network
# namespace, while agents are SIGKILLed and restarted, partitioned for
# 5-60 s, the server SIGKILLed and restarted and its store's disk (a
# tmpfs) filled; checks every task ended, 0 results lost, 0 run twice
# (bench/chaos/README.md). About 10 minutes. Needs root. Serialised with
# other benchmarks. BENCH_CHAOS_FLAGS passes flags through, e.g.
# "-tasks 200 -chaos-every 8s".
bench-chaos: build
	flock /tmp/cnperf-bench.lock $(GO) run ./bench/chaos -cnperf $(BIN) $(BENCH_CHAOS_FLAGS)

# The real-cluster test (internal/k8stest), once per CNI of K8S_CNIS, each
# on its own cluster: builds Kubernetes v1.34.4, flanneld v0.28.10 and (for
# calico) Calico v3.31.0 from Go modules on first use (cached in
# /var/cache/cnperf-k8s), starts a two-node cluster in network namespaces
# with the CNI (flannel: vxlan, then host-gw; calico: vxlan, then direct,
# switched in place) and runs cnperf on it. Needs root.
# CNPERF_K8S_REPORT=FILE writes the runs' record (each CNI's run merges its
# suites into the file); K8S_CNIS=bridge uses the harness's own conflist.
# Serialised by /tmp/cnperf-k8s.lock: two harness runs at once would tear
# down each other's cluster (fixed namespace and device names). Every CNI
# runs even when one fails; the target fails if any did. Each CNI's output
# is also kept in $TMPDIR/cnperf-test-k8s-CNI.log, and a failed run ends
# with what each failed test said (scripts/test-failures.sh): the verbose
# log's component dumps would otherwise bury it. Then test-k8s-compare.
K8S_CNIS ?= flannel calico
test-k8s: test-deps build
	@st=0; for cni in $(K8S_CNIS); do \
		echo "== test-k8s: CNI $$cni"; start=$$(date +%s); \
		log=$${TMPDIR:-/tmp}/cnperf-test-k8s-$$cni.log; \
		{ CNPERF_K8S_CNI=$$cni CNPERF_K8S_HARNESS=1 flock /tmp/cnperf-k8s.lock $(GO) test -count=1 -timeout 45m -v -run TestRealCluster ./internal/k8stest/; echo $$? > $$log.rc; } 2>&1 | tee $$log; \
		if [ "$$(cat $$log.rc)" != 0 ]; then st=1; ./scripts/test-failures.sh $$log; fi; rm -f $$log.rc; \
		echo "== test-k8s: CNI $$cni took $$(( $$(date +%s) - start ))s (log $$log)"; \
	done; $(MAKE) --no-print-directory test-k8s-compare || st=1; exit $$st

# cnperf compare (no server) of the study bundles the real-cluster runs'
# evaluate subtests wrote, $TMPDIR/cnperf-k8s-evaluate-CNI-MODE.json (each
# run replaces its own; test-k8s-cilium's too): a column per CNI and mode,
# a line per question. Fails when compare does; with no bundle it says so.
test-k8s-compare: build
	@set -- $${TMPDIR:-/tmp}/cnperf-k8s-evaluate-*.json; \
	if [ ! -e "$$1" ]; then echo "== test-k8s: no evaluate bundle to compare"; exit 0; fi; \
	echo "== test-k8s: cnperf compare of the evaluate bundles:"; ls -l "$$@"; \
	$(BIN) compare "$$@" || { echo "== test-k8s: cnperf compare failed"; exit 1; }

# The real-cluster test on Cilium v1.20.2 (vxlan, then native routing,
# switched in place), the same suites as test-k8s runs on Calico. Not part
# of make test: a cold Cilium build (agent and cilium-cni from the Go
# module) takes 6-30 min on 2 cores and the agents compile their BPF
# programs at every start, which would push make test past its time
# budget. Installs clang-19 and llvm-19 (scripts/install-test-deps.sh
# cilium). CNPERF_K8S_REPORT=FILE merges cni "cilium"'s suites into FILE.
# K8S_RUN narrows the subtests (go test -run).
K8S_RUN ?= TestRealCluster
test-k8s-cilium:
	./scripts/install-test-deps.sh cilium
	@echo "== test-k8s-cilium: CNI cilium"; start=$$(date +%s); \
	CNPERF_K8S_CNI=cilium CNPERF_K8S_HARNESS=1 flock /tmp/cnperf-k8s.lock $(GO) test -count=1 -timeout 55m -v -run '$(K8S_RUN)' ./internal/k8stest/; st=$$?; \
	echo "== test-k8s-cilium: took $$(( $$(date +%s) - start ))s"; \
	$(MAKE) --no-print-directory test-k8s-compare || st=1; exit $$st

clean:
	rm -rf bin
