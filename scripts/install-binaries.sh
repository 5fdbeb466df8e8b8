#!/usr/bin/env bash
# Installs the real servers the tests and the local environment run:
#   etcd, kube-apiserver, kube-controller-manager, kubectl  (built from the official Go modules, tools/k8s)
#   nats-server, nats (CLI)                                 (built with `go install` at pinned versions)
# Binaries are cached outside the repo, keyed by version, so later runs (and CI on the same machine) reuse them.
# With KUBEBUILDER_ASSETS set (controller-runtime's envtest convention), the Kubernetes binaries come from there
# instead and only kube-controller-manager is built if that folder lacks it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
K8S_VERSION=$(sed -n 's/^require k8s.io\/kubernetes v//p' "$root/tools/k8s/go.mod")
NATS_SERVER_VERSION=v2.14.10
NATS_CLI_VERSION=v0.5.0
cache=${MODELBACKFILL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelbackfill}
k8s_dir="$cache/k8s-v$K8S_VERSION"
nats_dir="$cache/nats-server-$NATS_SERVER_VERSION"
natscli_dir="$cache/natscli-$NATS_CLI_VERSION"

log() { printf '[install-binaries] %s\n' "$*" >&2; }

build_go() { # <out-dir> <name> <package...>: go build with visible progress, atomically placed
  local out=$1 name=$2; shift 2
  if [ -x "$out/$name" ]; then log "$name: cached at $out/$name"; return; fi
  mkdir -p "$out"
  log "$name: building (first time only; a few minutes on 2 cores)..."
  local start=$SECONDS
  (cd "$root/tools/k8s" && go build -trimpath -ldflags='-s -w' -o "$out/$name.tmp" "$@")
  mv "$out/$name.tmp" "$out/$name"
  log "$name: built in $((SECONDS - start))s"
}

install_go() { # <out-dir> <name> <module/pkg@version>
  local out=$1 name=$2 pkg=$3
  if [ -x "$out/$name" ]; then log "$name: cached at $out/$name"; return; fi
  mkdir -p "$out"
  log "$name: go install $pkg ..."
  local start=$SECONDS tmp
  tmp=$(mktemp -d)
  GOBIN="$tmp" GOFLAGS=-trimpath go install -ldflags='-s -w' "$pkg"
  mv "$tmp/$(basename "${pkg%@*}")" "$out/$name"
  rm -rf "$tmp"
  log "$name: built in $((SECONDS - start))s"
}

command -v go >/dev/null || { log "a Go toolchain is required to build the test servers (or set KUBEBUILDER_ASSETS)"; exit 1; }

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  for b in etcd kube-apiserver kubectl; do
    [ -x "$KUBEBUILDER_ASSETS/$b" ] || { log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks $b"; exit 1; }
  done
  log "Kubernetes binaries from KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
  if [ ! -x "$KUBEBUILDER_ASSETS/kube-controller-manager" ]; then
    build_go "$k8s_dir" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
  fi
else
  build_go "$k8s_dir" etcd ./cmd/etcd
  build_go "$k8s_dir" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
  build_go "$k8s_dir" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
  build_go "$k8s_dir" kubectl k8s.io/kubernetes/cmd/kubectl
fi
install_go "$nats_dir" nats-server "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION"
install_go "$natscli_dir" nats "github.com/nats-io/natscli/nats@$NATS_CLI_VERSION"

# One manifest the TypeScript harness reads, so both agree on where everything is.
manifest="$cache/binaries.json"
kdir=${KUBEBUILDER_ASSETS:-$k8s_dir}
kcm="$kdir/kube-controller-manager"; [ -x "$kcm" ] || kcm="$k8s_dir/kube-controller-manager"
cat > "$manifest.tmp" <<JSON
{
  "kubernetesVersion": "v$K8S_VERSION",
  "etcd": "$kdir/etcd",
  "kubeApiserver": "$kdir/kube-apiserver",
  "kubeControllerManager": "$kcm",
  "kubectl": "$kdir/kubectl",
  "natsServer": "$nats_dir/nats-server",
  "nats": "$natscli_dir/nats"
}
JSON
mv "$manifest.tmp" "$manifest"
log "binaries ready: $manifest"
