#!/bin/sh
# What the spare's checkout looks like (after in_repo.sh): its path, HEAD, branch and every ref's object, a line
# each (an empty line for no HEAD or a detached one). Sent as `sh -c <in_repo.sh + this> rft REPO`.
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit 96
pwd -P
git rev-parse -q --verify HEAD || echo
git symbolic-ref -q --short HEAD || echo
git for-each-ref --format='%(objectname)'
