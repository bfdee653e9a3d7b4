#!/bin/sh
# Land the spare's checkout on a commit, fast-forward only (after in_repo.sh); exit 93 when it is not one.
# Sent as `sh -c <in_repo.sh + this> rft REPO COMMIT BRANCH bundle|none` (stdin: the git bundle for `bundle`;
# BRANCH '' = detached).
set -e
new=$2 branch=$3
if [ "$4" = bundle ]; then
  b="$(git rev-parse --git-dir)/rft-sync.bundle"
  cat > "$b"
  git fetch -q "$b" "+HEAD:refs/rft/incoming"
  rm -f "$b"
fi
git cat-file -e "$new^{commit}"
old=$(git rev-parse -q --verify HEAD || true)
if [ -n "$old" ] && ! git merge-base --is-ancestor "$old" "$new"; then exit 93; fi
cur=$(git symbolic-ref -q --short HEAD || true)
if [ -z "$branch" ]; then
  git checkout -q --detach "$new"
elif [ "$cur" = "$branch" ]; then
  git merge -q --ff-only "$new"
else
  if have=$(git rev-parse -q --verify "refs/heads/$branch"); then
    git merge-base --is-ancestor "$have" "$new" || exit 93
  fi
  git checkout -q -B "$branch" "$new"
fi
git update-ref -d refs/rft/incoming 2>/dev/null || true
