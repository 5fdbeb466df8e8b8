#!/usr/bin/env bash
# The reaper of the test environment (see supervisor.ts). Usage: reaper.sh <grace-seconds>, commands on stdin:
#   group <pgid>   kill this process group when stdin ends (the owner exited, crashed or was killed)
#   forget <pgid>  stop watching a group
#   script <path>  run this bash script after the processes are gone, before the directories are removed (it
#                  undoes what the processes did outside their directory: mounts, cgroups, network; at most 60 s)
#   dir <path>     remove this directory after the processes are gone
#   release        exit without killing anything (a detached environment outlives its starter)
# At EOF, or on SIGTERM/SIGINT/SIGHUP, groups are stopped one by one in reverse order of registration (the
# controller manager before the apiserver before etcd: an apiserver whose etcd is already gone hangs on SIGTERM):
# SIGTERM, then SIGKILL if the group's leader is still there after the grace period.
grace=$1
groups=()
debug() { [ -z "${MODELBACKFILL_REAPER_LOG:-}" ] || echo "$(date +%T.%N) reaper $$: $*" >>"$MODELBACKFILL_REAPER_LOG"; }
dirs=()
scripts=()

leader_alive() { # a zombie does not count: its parent may be gone and nobody reaps it soon
  local s
  { read -r s <"/proc/$1/stat"; } 2>/dev/null || return 1
  s=${s##*) }
  [ "${s:0:1}" != Z ] && [ "${s:0:1}" != X ]
}

reap() {
  trap '' TERM INT HUP
  debug "reaping groups=(${groups[*]}) dirs=(${dirs[*]})"
  local g i n
  for ((n = ${#groups[@]} - 1; n >= 0; n--)); do
    g=${groups[n]}
    leader_alive "$g" || continue
    kill -TERM -- "-$g" 2>/dev/null
    for ((i = 0; i < grace * 20; i++)); do
      leader_alive "$g" || break
      sleep 0.05
    done
    leader_alive "$g" && kill -KILL -- "-$g" 2>/dev/null
  done
  for s in "${scripts[@]}"; do [ ! -f "$s" ] || timeout 60 bash "$s" || debug "script $s failed"; done
  # --one-file-system: a mount the script could not remove is left, with what it holds, instead of emptied.
  for d in "${dirs[@]}"; do rm -rf --one-file-system -- "$d" || debug "rm -rf $d failed"; done
  debug "done"
  exit 0
}

trap reap TERM INT HUP
while IFS=' ' read -r cmd arg; do
  case $cmd in
    group) groups+=("$arg") && debug "$cmd $arg" ;;
    forget)
      keep=()
      for g in "${groups[@]}"; do [ "$g" = "$arg" ] || keep+=("$g"); done
      groups=("${keep[@]}")
      ;;
    dir) dirs+=("$arg") && debug "$cmd $arg" ;;
    script) scripts+=("$arg") && debug "$cmd $arg" ;;
    release) debug "released" && exit 0 ;;
  esac
done
reap
