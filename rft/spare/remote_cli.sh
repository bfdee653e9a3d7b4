#!/bin/sh
# spare.py in the spare's checkout, with the spare's Python (after in_repo.sh).
# Sent as `sh -c <in_repo.sh + this> rft REPO PYTHON ARGV_B64`; exit 98: no spare.py there, 99: no PYTHON.
test -f spare.py || exit 98
p=$(x "$2")
command -v "$p" >/dev/null 2>&1 || exit 99
exec "$p" spare.py --argv-b64 "$3"
