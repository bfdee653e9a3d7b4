#!/usr/bin/env bash
# Runs one spare job inside its tmux pane: output is teed to LOG, the command's own exit status goes to STATUS.
# Usage: bash rft/spare/job.sh STATUS_JSON LOG_FILE ARGV_FILE   (ARGV_FILE: the command's argv, NUL-separated)
set -euo pipefail

status=$1
log=$2
mapfile -d '' -t argv < "$3"

rc=0
# pipefail makes the pipeline fail when the command fails; PIPESTATUS[0] is the command's own status, not tee's.
"${argv[@]}" 2>&1 | tee -a "$log" || rc=${PIPESTATUS[0]}

tmp="$status.tmp.$$"
printf '{"exit_code": %d, "finished_at": %s}\n' "$rc" "$(date +%s)" > "$tmp"
mv -f "$tmp" "$status"
exit "$rc"
