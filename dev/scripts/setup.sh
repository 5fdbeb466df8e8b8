#!/bin/sh
# The first five minutes: `npm run demo` and `npm test` run this first (their pre-scripts), so a fresh clone needs
# nothing but Node >= 20 and Go. It installs the npm dependencies when node_modules is missing (`npm ci`), then the
# real test servers when the binary manifest is missing or stale (dev/scripts/install-binaries.sh: about 30 minutes on
# two cores the first time, with a plan, an estimate and progress lines). Later runs check and return in about a
# second. Plain sh: it must run before any dependency exists.
#   --dry-run                   say what would be done, do nothing
#   MODELBACKFILL_SKIP_SETUP=1  skip it entirely
#   MODELBACKFILL_CACHE=DIR     where the binaries are cached (default ~/.cache/modelbackfill)
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
dry_run=false
[ "${1:-}" = --dry-run ] && dry_run=true
say() { printf '[setup] %s\n' "$*" >&2; }

[ "${MODELBACKFILL_SKIP_SETUP:-}" = 1 ] && exit 0

command -v node >/dev/null 2>&1 || { say "Node >= 20 is required (https://nodejs.org)"; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { say "Node >= 20 is required, this is $(node --version)"; exit 1; }

# npm writes node_modules/.package-lock.json last: without it the install is absent or was interrupted. The
# gateway client (clients/ts) is a workspace: an install from before it has no link to it.
if [ ! -f node_modules/.package-lock.json ] || [ ! -e node_modules/@flexinfer/gateway-emitter ]; then
  if $dry_run; then
    say "would run: npm ci (node_modules is missing; about a minute)"
  else
    say "node_modules is missing: npm ci (about a minute)..."
    npm ci --no-audit --no-fund
  fi
fi

if [ -x node_modules/.bin/tsx ]; then
  # The test harness's own check (test/env/binaries.ts), so both agree on what "missing" means.
  reason=$(node_modules/.bin/tsx dev/scripts/binaries-stale.ts) || { say "checking the binaries failed"; exit 1; }
  [ -z "$reason" ] && exit 0
  say "test servers: $reason"
fi
if $dry_run; then
  say "would run: bash dev/scripts/install-binaries.sh"
  exec bash dev/scripts/install-binaries.sh --dry-run
fi
exec bash dev/scripts/install-binaries.sh
