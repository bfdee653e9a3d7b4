#!/bin/sh
# Prelude of the spare scripts that run in its checkout (node.py puts it in front of them): x PATH expands a
# leading ~ on the spare, not on the primary; then cd to the checkout $1, or exit 97 (no repo there).
# shellcheck disable=SC2088  # a literal ~ is the pattern matched, on purpose
x() { case $1 in "~") echo "$HOME";; "~/"*) echo "$HOME/${1#"~/"}";; *) echo "$1";; esac; }
cd "$(x "$1")" 2>/dev/null || exit 97
