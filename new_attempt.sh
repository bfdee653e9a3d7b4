#!/usr/bin/env bash
# Start a training attempt: git branch attempt-NN-short-desc plus notes/attempt-NN-short-desc.md from the template.
# Usage: bash new_attempt.sh NN short-desc     (e.g. bash new_attempt.sh 29 lr-1e-6; RFT_ROOT, TEMPLATE overridable)
set -euo pipefail

RFT_ROOT="${RFT_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
TEMPLATE="${TEMPLATE:-$RFT_ROOT/notes/attempt-template.md}"

die() { echo "new_attempt.sh: $*" >&2; exit 2; }

[[ $# -eq 2 ]] || die "expected 2 arguments (NN short-desc), got $#; usage: bash new_attempt.sh 29 lr-1e-6"
NN="$1"
DESC="$2"
# Two or three digits so branches sort and read like attempt-26-grpo-20b-em.
[[ "$NN" =~ ^[0-9]{2,3}$ ]] || die "NN must be 2-3 digits (e.g. 07, 29), got '$NN'"
# Lowercase words joined by single hyphens: safe in branch names, file names and sed.
[[ "$DESC" =~ ^[a-z0-9]+(-[a-z0-9]+)*$ && ${#DESC} -le 40 ]] \
  || die "short-desc must be lowercase letters/digits joined by single hyphens, at most 40 chars, got '$DESC'"
BRANCH="attempt-$NN-$DESC"
NOTE="$RFT_ROOT/notes/$BRANCH.md"

cd "$RFT_ROOT"
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || die "$RFT_ROOT is not a git work tree"
[[ -f "$TEMPLATE" ]] || die "template not found: $TEMPLATE"
if git show-ref --verify --quiet "refs/heads/$BRANCH"; then die "branch $BRANCH already exists"; fi
EXISTING="$(git for-each-ref --format='%(refname:short)' "refs/heads/attempt-$NN-*")"
[[ -z "$EXISTING" ]] || die "attempt $NN already has a branch: $EXISTING"
[[ ! -e "$NOTE" ]] || die "note already exists: $NOTE"
DIRTY="$(git status --porcelain --untracked-files=no)"
[[ -z "$DIRTY" ]] || die "work tree has uncommitted changes; commit them first (the attempt must start from a commit):
$DIRTY"

BASE="$(git rev-parse --abbrev-ref HEAD)@$(git rev-parse --short HEAD)"
TMP="$(mktemp "$RFT_ROOT/notes/.$BRANCH.XXXXXX")"
trap 'rm -f "$TMP"' EXIT
sed -e "s/{{NN}}/$NN/g" -e "s/{{DESC}}/$DESC/g" -e "s/{{BRANCH}}/$BRANCH/g" \
    -e "s/{{DATE}}/$(date -u +%Y-%m-%d)/g" -e "s|{{BASE}}|$BASE|g" "$TEMPLATE" > "$TMP"
git switch --quiet -c "$BRANCH"
mv "$TMP" "$NOTE"
trap - EXIT
echo "created branch $BRANCH (from $BASE) and $NOTE"
echo "next: fill in the hypothesis and changes, commit, then: bash train_grpo_20b.sh | tee log"
