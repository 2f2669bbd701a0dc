#!/usr/bin/env bash
# Builds the Kubernetes binaries and CNI plugins the k8s test harness runs,
# from Go modules, into a cache directory, and does nothing when they are
# already there. Usage: build.sh [CACHE_DIR]   (default /var/cache/cnperf-k8s)
#
# `go install k8s.io/kubernetes/cmd/...@VERSION` does not work because
# kubernetes' go.mod replaces its staging modules with local paths; so this
# writes a small module that requires k8s.io/kubernetes, repeats that replace
# block with the published versions, blank-imports the six commands and
# builds them with the version ldflags. See docs/kubernetes.md.
#
# flanneld (FLANNEL_VERSION) goes into the same bin dir as
# flanneld-$FLANNEL_VERSION, built from flannel's Go module by a small
# wrapper module holding flannel's main.go without the tencentvpc backend
# (its SDK module is not served by the module proxy) and the udp backend
# (it needs CGO); the vxlan and host-gw backends are flannel's own.
#
# With CALICO_VERSION set (v3.31.0), Calico goes into the same bin dir:
# calico-node-$CALICO_VERSION (node/cmd/calico-node: -startup, -felix,
# -allocate-tunnel-addrs) and the CNI plugins cni/calico and cni/calico-ipam
# (one binary, chosen by its name), built static from a wrapper module that
# requires Calico's pseudo-version (its v3 tags are not valid Go module
# versions) and repeats Calico's replace block with its local paths turned
# into that pseudo-version; Calico's manifest for VXLAN
# (manifests/calico-vxlan.yaml: its CRDs, ServiceAccounts and RBAC) is copied
# beside them as calico-$CALICO_VERSION.yaml. See docs/kubernetes.md.
#
# With CILIUM_VERSION set (v1.20.2), Cilium goes into the same bin dir:
# cilium-agent-$CILIUM_VERSION (github.com/cilium/cilium/daemon) and the CNI
# plugin cni/cilium-cni, built static from a wrapper module that requires
# Cilium and repeats its replace line for controller-tools and pins gobgp to
# v4.8.0 (Cilium requires an untagged gobgp commit that does not build with
# the rest of its module graph). Cilium's operator is not built (its
# sigs.k8s.io/mcs-api/controllers import is refused). The agent compiles its
# BPF programs when it starts, so the module's bpf/ sources and its CRDs
# (pkg/k8s/apis/cilium.io/client/crds/v2 and v2alpha1) are copied beside the
# binaries as cilium-$CILIUM_VERSION/{bpf,crds}; clang and llc (Debian's
# clang-19, llc-19) come from scripts/install-test-deps.sh. The Cilium build
# is serialised by a lock file of its own in the cache (it takes 6-30 min
# cold and nothing else builds it). See docs/kubernetes.md.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
CNI_VERSION=${CNI_VERSION:-v1.9.1}
FLANNEL_VERSION=${FLANNEL_VERSION:-v0.28.10}
CALICO_VERSION=${CALICO_VERSION:-}
CILIUM_VERSION=${CILIUM_VERSION:-}
CILIUM_GOBGP=${CILIUM_GOBGP:-v4.8.0}
# The commit of Calico's v3.31.0 tag and of its api module, as the module
# proxy serves them.
CALICO_PSEUDO=${CALICO_PSEUDO:-v0.0.0-20251021213802-b1f3c43f8437}
CALICO_API=${CALICO_API:-v0.0.0-20251022175904-f2ab03771208}
cache=${1:-/var/cache/cnperf-k8s}
src=$cache/src-$K8S_VERSION
bin=$cache/bin-$K8S_VERSION-cni-$CNI_VERSION
cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
plugins=(main/bridge main/loopback ipam/host-local meta/bandwidth meta/portmap)

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local

build_flannel() {
  local fsrc=$cache/src-flannel-$FLANNEL_VERSION out=$bin/flanneld-$FLANNEL_VERSION
  [ -x "$out" ] && return 0
  mkdir -p "$fsrc"
  (
    cd "$fsrc"
    cat >go.mod <<MOD
module cnperf.local/flannelbuild

go 1.26.0

require github.com/flannel-io/flannel $FLANNEL_VERSION
MOD
    dir=$(go mod download -json "github.com/flannel-io/flannel@$FLANNEL_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
    [ -f "$dir/main.go" ] || { echo "build.sh: no main.go in flannel $FLANNEL_VERSION" >&2; exit 1; }
    grep -v -e '"github.com/flannel-io/flannel/pkg/backend/tencentvpc"' -e '"github.com/flannel-io/flannel/pkg/backend/udp"' "$dir/main.go" >main.go
    grep -q '"github.com/flannel-io/flannel/pkg/backend/vxlan"' main.go || { echo "build.sh: flannel's main.go has no vxlan backend import" >&2; exit 1; }
    go mod tidy
    go build -trimpath -ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION" -o "$out.tmp" .
    mv "$out.tmp" "$out"
  )
}

build_calico() {
  [ -n "$CALICO_VERSION" ] || return 0
  local csrc=$cache/src-calico-$CALICO_VERSION out=$bin/calico-node-$CALICO_VERSION
  [ -x "$out" ] && [ -x "$bin/cni/calico" ] && [ -x "$bin/cni/calico-ipam" ] && [ -f "$bin/calico-$CALICO_VERSION.yaml" ] && return 0
  mkdir -p "$csrc" "$bin/cni"
  (
    cd "$csrc"
    export GONOSUMDB=github.com/projectcalico GOFLAGS="-mod=mod -buildvcs=false"
    cat >go.mod <<MOD
module cnperf.local/calicobuild

go 1.25.0

require (
	github.com/projectcalico/calico $CALICO_PSEUDO
	github.com/projectcalico/api $CALICO_API
)
MOD
    json=$(go mod download -json "github.com/projectcalico/calico@$CALICO_PSEUDO")
    cmod=$(echo "$json" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
    dir=$(echo "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
    [ -f "$cmod" ] && [ -f "$dir/manifests/calico-vxlan.yaml" ] || { echo "build.sh: no go.mod or CRDs for calico@$CALICO_PSEUDO" >&2; exit 1; }
    {
      echo
      echo "replace ("
      sed -n '/^replace (/,/^)/p' "$cmod" | sed -e 's#//.*$##' |
        sed -n -e 's#^[[:space:]]*github.com/projectcalico/api => \./api[[:space:]]*$#\tgithub.com/projectcalico/api => github.com/projectcalico/api '"$CALICO_API"'#p' \
          -e 's#^[[:space:]]*\(github.com/projectcalico/calico/lib/[a-z]*\) => \./lib/.*$#\t\1 => \1 '"$CALICO_PSEUDO"'#p' \
          -e 's#^[[:space:]]*\([^ ]*\) => \([^ .][^ ]*\) \(v[^ ]*\)[[:space:]]*$#\t\1 => \2 \3#p'
      echo ")"
    } >>go.mod
    n=$(grep -c "=> k8s.io/" go.mod || true)
    [ "$n" -ge 20 ] && grep -q "lib/std => .* $CALICO_PSEUDO" go.mod || { echo "build.sh: Calico's replace block not found in $cmod ($n k8s.io replaces)" >&2; exit 1; }
    {
      echo "// Package calicobuild only pins the Calico commands the harness builds."
      echo "package calicobuild"
      echo
      echo "import ("
      echo "	_ \"github.com/projectcalico/calico/cni-plugin/cmd/calico\""
      echo "	_ \"github.com/projectcalico/calico/node/cmd/calico-node\""
      echo ")"
    } >tools.go
    go mod tidy
    ld="-s -w -X github.com/projectcalico/calico/pkg/buildinfo.Version=$CALICO_VERSION"
    go build -trimpath -ldflags "$ld" -o "$out.tmp" github.com/projectcalico/calico/node/cmd/calico-node
    go build -trimpath -ldflags "$ld" -o "$bin/cni/calico.tmp" github.com/projectcalico/calico/cni-plugin/cmd/calico
    cp "$dir/manifests/calico-vxlan.yaml" "$bin/calico-$CALICO_VERSION.yaml.tmp"
    cp "$bin/cni/calico.tmp" "$bin/cni/calico-ipam.tmp"
    mv "$bin/cni/calico-ipam.tmp" "$bin/cni/calico-ipam"
    mv "$bin/cni/calico.tmp" "$bin/cni/calico"
    mv "$bin/calico-$CALICO_VERSION.yaml.tmp" "$bin/calico-$CALICO_VERSION.yaml"
    mv "$out.tmp" "$out"
  )
}

build_cilium() {
  [ -n "$CILIUM_VERSION" ] || return 0
  local ssrc=$cache/src-cilium-$CILIUM_VERSION out=$bin/cilium-agent-$CILIUM_VERSION data=$bin/cilium-$CILIUM_VERSION
  cilium_built() { [ -x "$out" ] && [ -x "$bin/cni/cilium-cni" ] && [ -f "$data/bpf/bpf_lxc.c" ] && [ -d "$data/crds/v2alpha1" ]; }
  cilium_built && return 0
  mkdir -p "$ssrc" "$bin/cni"
  (
    flock 9
    cilium_built && exit 0
    cd "$ssrc"
    cat >go.mod <<MOD
module cnperf.local/ciliumbuild

go 1.26.0

require github.com/cilium/cilium $CILIUM_VERSION

replace (
	sigs.k8s.io/controller-tools => github.com/cilium/controller-tools v0.21.0-1
	github.com/osrg/gobgp/v4 => github.com/osrg/gobgp/v4 $CILIUM_GOBGP
)
MOD
    dir=$(go mod download -json "github.com/cilium/cilium@$CILIUM_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
    [ -f "$dir/bpf/bpf_lxc.c" ] && [ -d "$dir/pkg/k8s/apis/cilium.io/client/crds/v2alpha1" ] || { echo "build.sh: no bpf/ sources or CRDs in cilium@$CILIUM_VERSION" >&2; exit 1; }
    {
      echo "// Package ciliumbuild only pins the Cilium commands the harness builds."
      echo "package ciliumbuild"
      echo
      echo "import ("
      echo "	_ \"github.com/cilium/cilium/daemon\""
      echo "	_ \"github.com/cilium/cilium/plugins/cilium-cni\""
      echo ")"
    } >tools.go
    go mod tidy
    ld="-s -w -X github.com/cilium/cilium/pkg/version.ciliumVersion=${CILIUM_VERSION#v}"
    go build -trimpath -ldflags "$ld" -o "$out.tmp" github.com/cilium/cilium/daemon
    go build -trimpath -ldflags "$ld" -o "$bin/cni/cilium-cni.tmp" github.com/cilium/cilium/plugins/cilium-cni
    rm -rf "$data.tmp" && mkdir -p "$data.tmp/crds"
    cp -r "$dir/bpf" "$data.tmp/bpf"
    cp -r "$dir/pkg/k8s/apis/cilium.io/client/crds/v2" "$dir/pkg/k8s/apis/cilium.io/client/crds/v2alpha1" "$data.tmp/crds/"
    rm -f "$data.tmp"/crds/*/*.go
    chmod -R u+w "$data.tmp"
    rm -rf "$data" && mv "$data.tmp" "$data"
    mv "$bin/cni/cilium-cni.tmp" "$bin/cni/cilium-cni"
    mv "$out.tmp" "$out"
  ) 9>"$cache/.cilium-$CILIUM_VERSION.lock"
}

if [ -f "$bin/.complete" ]; then
  build_flannel
  build_calico
  build_cilium
  echo "$bin"
  exit 0
fi

mkdir -p "$src" "$bin/cni"

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
staging=v0.${K8S_VERSION#v1.}

cd "$src"
if [ ! -f go.sum ] || ! grep -q "k8s.io/kubernetes $K8S_VERSION" go.mod; then
  cat >go.mod <<MOD
module cnperf.local/k8sbuild

go 1.24.0

require k8s.io/kubernetes $K8S_VERSION
MOD
  # kubernetes' own go.mod: its replace block names the staging modules.
  kmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  [ -f "$kmod" ] || { echo "build.sh: no go.mod for k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }
  {
    echo
    echo "replace ("
    sed -n '/^replace (/,/^)/p' "$kmod" |
      sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/src/.*$#\t\1 => \1 '"$staging"'#p'
    echo ")"
  } >>go.mod
  n=$(grep -c "=> k8s.io/.* $staging" go.mod || true)
  [ "$n" -ge 25 ] || { echo "build.sh: found only $n staging replaces in $kmod" >&2; exit 1; }
  {
    echo "// Package k8sbuild only pins the Kubernetes commands the harness builds."
    echo "package k8sbuild"
    echo
    echo "import ("
    for c in "${cmds[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
    echo ")"
  } >tools.go
  go mod tidy
fi

vpkgs=(k8s.io/component-base/version k8s.io/client-go/pkg/version)
ldflags="-s -w"
for p in "${vpkgs[@]}"; do
  ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
pkgs=()
for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
go build -trimpath -ldflags "$ldflags" -o "$bin/" "${pkgs[@]}"

cnipkgs=()
for p in "${plugins[@]}"; do cnipkgs+=("github.com/containernetworking/plugins/plugins/$p@$CNI_VERSION"); done
GOBIN="$bin/cni" go install -trimpath -ldflags "-s -w" "${cnipkgs[@]}"

for c in "${cmds[@]}"; do [ -x "$bin/$c" ] || { echo "build.sh: $c missing" >&2; exit 1; }; done
for p in "${plugins[@]}"; do [ -x "$bin/cni/${p#*/}" ] || { echo "build.sh: CNI ${p#*/} missing" >&2; exit 1; }; done
touch "$bin/.complete"
build_flannel
build_calico
build_cilium
echo "$bin"
