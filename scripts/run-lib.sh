# shellcheck shell=bash
# Shared by the scripts that run a tier against the real API server
# (scripts/e2e.sh, scripts/chart-check.sh): timed parts and a work
# directory whose API server is always stopped on exit.
#
#   . scripts/run-lib.sh
#   run_init NAME KEEP_VAR [K8S_SUBDIR]   # sets $dir, $k8s_dir; traps EXIT
#   part "what comes next"                # ends the previous part, starts this one
#
# On exit: stops the API server in $k8s_dir, prints the time of each part,
# and removes $dir unless the run failed or the variable named KEEP_VAR is 1.
# The caller sets $root (the repository root) first.

run_init() {
  : "${root:?set root to the repository root before run_init}"
  run_name=$1 run_keep_var=$2
  t0=$(date +%s) t_part=$t0 part_name='' timings=()
  dir=$(mktemp -d "${TMPDIR:-/tmp}/kura-$run_name.XXXXXX")
  k8s_dir=$dir${3:+/$3}
  trap run_finish EXIT
}

part() {
  local now; now=$(date +%s)
  if [ -n "$part_name" ]; then timings+=("$(printf '%-40s %4ss' "$part_name" $((now - t_part)))"); fi
  part_name=$1 t_part=$now
  echo "[$run_name +$((now - t0))s] $1"
}

run_finish() {
  local rc=$?
  part "stop"
  "$root/scripts/k8s-down.sh" "$k8s_dir" >/dev/null 2>&1 || rc=1
  part "done"
  printf '%s\n' "$run_name timings:" "${timings[@]/#/  }"
  if [ "${!run_keep_var:-}" = 1 ] || [ $rc -ne 0 ]; then
    echo "$run_name: work directory kept: $dir" >&2
  else
    rm -rf "$dir"
  fi
  exit $rc
}
