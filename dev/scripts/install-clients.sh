#!/usr/bin/env bash
# The gateway clients' toolchains for their tests (test/integration/clients/): a Python venv with the client
# installed the way users install it (`pip install ./clients/python`), pytest and the pinned LiteLLM proxy, and the
# Go client's modules. Cached under $MODELBACKFILL_CACHE (default ~/.cache/modelbackfill); a second run checks a
# stamp (the client's files and pins) and returns at once. First run: about 3-5 minutes (LiteLLM's proxy extra).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${MODELBACKFILL_CACHE:-$HOME/.cache/modelbackfill}
venv=$cache/py-clients
say() { printf '[install-clients] %s\n' "$*" >&2; }

mkdir -p "$cache"
# Test files run in parallel: one install at a time.
exec 9>"$cache/install-clients.lock"
flock 9

command -v python3 >/dev/null || { say "python3 (>= 3.9, with venv) is required for the Python client's tests"; exit 1; }
command -v go >/dev/null || { say "go is required for the Go client's tests"; exit 1; }

stamp=$(cd "$root" && find clients/python -type f -not -path '*/__pycache__/*' -not -path '*.egg-info/*' \
  -not -path '*/.pytest_cache/*' -not -path '*/.mypy_cache/*' -not -path '*/build/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
if [ -f "$venv/.stamp" ] && [ "$(cat "$venv/.stamp")" = "$stamp" ] && [ -x "$venv/bin/python" ]; then
  :
else
  [ -x "$venv/bin/python" ] || { say "creating $venv"; python3 -m venv "$venv"; }
  say "pip install ./clients/python and its test requirements (LiteLLM's proxy: a few minutes the first time)"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$root/clients/python/requirements-test.txt"
  # Not editable: the tests run what `pip install ./clients/python` installs.
  "$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$root/clients/python"
  "$venv/bin/pip" install -q --disable-pip-version-check "$root/clients/python"
  echo "$stamp" >"$venv/.stamp"
fi

(cd "$root/clients/go" && go mod download)
say "ready: $venv, Go modules of clients/go"
