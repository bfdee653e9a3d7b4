#!/usr/bin/env bash
# Apply rft's patch series (patches/series) to the installed OpenRLHF 0.9.3: all or nothing, idempotent.
# usage: bash apply_patches.sh [--check | --reverse] [--target DIR]   (PYTHON=... picks the interpreter)
set -euo pipefail

RFT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PATCH_DIR="${PATCH_DIR:-$RFT_ROOT/patches}"
SERIES="$PATCH_DIR/series"
PYTHON="${PYTHON:-python}"
# The only OpenRLHF release these patches were written against (their context lines are its source).
REQUIRED_VERSION="0.9.3"

usage() {
    cat <<EOF
usage: bash apply_patches.sh [--check | --reverse] [--target DIR]

Applies every patch listed in patches/series, in order, to OpenRLHF $REQUIRED_VERSION.
The whole series is first tried on a scratch copy; the real files change only if every patch applies.

  (no option)   apply the series; a second run says "already applied" and exits 0
  --check       print applied / not applied / conflicts per patch; exit 0 only if all are applied
  --reverse     take the whole series back out (files return byte-identical to the release)
  --target DIR  patch DIR/openrlhf instead of the package found by \$PYTHON (default: python on PATH)
  -h, --help    this text
EOF
}

MODE="apply"
TARGET=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --check) MODE="check" ;;
        --reverse) MODE="reverse" ;;
        --target)
            [[ $# -ge 2 ]] || { echo "apply_patches.sh: --target needs a directory" >&2; exit 2; }
            TARGET="$2"
            shift
            ;;
        -h | --help) usage; exit 0 ;;
        *) echo "apply_patches.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

die() {
    echo "apply_patches.sh: $*" >&2
    exit 1
}

# --- locate the target and check the version ---------------------------------------------------
if [[ -n "$TARGET" ]]; then
    [[ -d "$TARGET/openrlhf" ]] || die "--target $TARGET has no openrlhf/ directory"
    TARGET="$(cd "$TARGET" && pwd)"
    VERSION=""
    shopt -s nullglob
    for meta in "$TARGET"/openrlhf-*.dist-info/METADATA; do
        VERSION="$(sed -n 's/^Version: //p' "$meta" | head -n1)"
    done
    shopt -u nullglob
    if [[ -z "$VERSION" ]]; then
        echo "openrlhf in $TARGET: no dist-info, version not recorded; the dry run checks the sources"
        VERSION="$REQUIRED_VERSION"
    fi
else
    command -v "$PYTHON" >/dev/null || die "no '$PYTHON' on PATH (set PYTHON=/path/to/python)"
    FOUND="$("$PYTHON" - <<'EOF'
import importlib.metadata, importlib.util, os, sys
spec = importlib.util.find_spec("openrlhf")
if spec is None or not spec.submodule_search_locations:
    sys.exit("openrlhf is not installed for " + sys.executable)
print(importlib.metadata.version("openrlhf"))
print(os.path.dirname(list(spec.submodule_search_locations)[0]))
EOF
)" || die "cannot locate openrlhf with $PYTHON"
    VERSION="$(sed -n 1p <<<"$FOUND")"
    TARGET="$(sed -n 2p <<<"$FOUND")"
fi
[[ "$VERSION" == "$REQUIRED_VERSION" ]] ||
    die "openrlhf $VERSION found in $TARGET, but these patches are for $REQUIRED_VERSION only; refusing"

# --- read the series ------------------------------------------------------------------------------
[[ -f "$SERIES" ]] || die "missing series file $SERIES"
PATCHES=()
while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line%%#*}"
    line="$(echo "$line" | xargs)"
    [[ -z "$line" ]] && continue
    [[ -f "$PATCH_DIR/$line" ]] || die "series names $line, but $PATCH_DIR/$line does not exist"
    PATCHES+=("$line")
done <"$SERIES"
[[ ${#PATCHES[@]} -gt 0 ]] || die "series $SERIES is empty"

# Files the series touches (paths relative to TARGET, from the "+++ b/..." headers).
mapfile -t FILES < <(for p in "${PATCHES[@]}"; do
    sed -n 's/^+++ b\/\([^[:space:]]*\).*/\1/p' "$PATCH_DIR/$p"
done | sort -u)

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# snapshot DEST: copy the touched files of TARGET into DEST (same relative paths).
snapshot() {
    local dest="$1" f
    rm -rf "$dest"
    mkdir -p "$dest"
    for f in "${FILES[@]}"; do
        if [[ -f "$TARGET/$f" ]]; then
            mkdir -p "$dest/$(dirname "$f")"
            cp -p "$TARGET/$f" "$dest/$f"
        fi
    done
}

# run_patch DIR PATCH [extra patch args...]: never prompts, never leaves .rej/.orig files.
run_patch() {
    local dir="$1" p="$2"
    shift 2
    patch -p1 --batch --forward --fuzz=0 --no-backup-if-mismatch --reject-file=- \
        -d "$dir" -i "$PATCH_DIR/$p" "$@"
}

# --- work out the state on a scratch copy -------------------------------------------------------
# Fully applied <=> the whole series reverses cleanly (last patch first).
ALL_APPLIED=1
snapshot "$WORK/rev"
for ((i = ${#PATCHES[@]} - 1; i >= 0; i--)); do
    if ! run_patch "$WORK/rev" "${PATCHES[i]}" --reverse >/dev/null 2>&1; then
        ALL_APPLIED=0
        break
    fi
done

# Otherwise walk forward on a scratch copy: a patch that applies is "not applied" (and is applied to the
# scratch copy so the next patch sees its context); one that reverses is "applied"; else "conflicts".
declare -A STATUS=()
declare -A DETAIL=()
N_APPLIED=0
N_PENDING=0
N_CONFLICT=0
if [[ $ALL_APPLIED -eq 1 ]]; then
    for p in "${PATCHES[@]}"; do STATUS[$p]="applied"; done
    N_APPLIED=${#PATCHES[@]}
else
    snapshot "$WORK/fwd"
    for p in "${PATCHES[@]}"; do
        if out="$(run_patch "$WORK/fwd" "$p" --dry-run 2>&1)"; then
            run_patch "$WORK/fwd" "$p" >/dev/null 2>&1 || die "$p: dry run passed but the scratch apply failed"
            STATUS[$p]="not applied"
            N_PENDING=$((N_PENDING + 1))
        elif run_patch "$WORK/fwd" "$p" --reverse --dry-run >/dev/null 2>&1; then
            STATUS[$p]="applied"
            N_APPLIED=$((N_APPLIED + 1))
        else
            STATUS[$p]="conflicts"
            DETAIL[$p]="$(grep -E 'patching file|Hunk|FAILED|malformed|can.t find|Reversed|No file' <<<"$out" || true)"
            N_CONFLICT=$((N_CONFLICT + 1))
        fi
    done
fi

report() {
    local p
    for p in "${PATCHES[@]}"; do
        printf '  %-28s %s\n' "$p" "${STATUS[$p]}"
        if [[ -n "${DETAIL[$p]:-}" ]]; then
            while IFS= read -r l; do echo "      $l"; done <<<"${DETAIL[$p]}"
        fi
    done
}

conflict_error() {
    local p
    echo "apply_patches.sh: the series does not apply cleanly to $TARGET; nothing was changed:" >&2
    report >&2
    for p in "${PATCHES[@]}"; do
        [[ "${STATUS[$p]}" == "conflicts" ]] && echo "first failing patch: $p" >&2 && break
    done
    exit 1
}

# commit_series forward|reverse: run the series for real on TARGET; restore the snapshot on any failure.
commit_series() {
    local direction="$1" i p
    local order=()
    if [[ "$direction" == "reverse" ]]; then
        for ((i = ${#PATCHES[@]} - 1; i >= 0; i--)); do order+=("${PATCHES[i]}"); done
    else
        order=("${PATCHES[@]}")
    fi
    snapshot "$WORK/backup"
    for p in "${order[@]}"; do
        local args=()
        [[ "$direction" == "reverse" ]] && args=(--reverse)
        if ! out="$(run_patch "$TARGET" "$p" "${args[@]}" 2>&1)"; then
            (cd "$WORK/backup" && find . -type f -exec cp -p {} "$TARGET/{}" \;)
            echo "apply_patches.sh: $p failed on $TARGET (restored every file):" >&2
            echo "$out" >&2
            exit 1
        fi
    done
    find "$TARGET/openrlhf" -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null || true
}

case "$MODE" in
    check)
        echo "openrlhf $VERSION at $TARGET/openrlhf:"
        report
        if [[ $N_APPLIED -eq ${#PATCHES[@]} ]]; then
            echo "all ${#PATCHES[@]} patches applied"
            exit 0
        fi
        echo "$N_APPLIED applied, $N_PENDING not applied, $N_CONFLICT conflicting (of ${#PATCHES[@]})"
        [[ $N_CONFLICT -gt 0 ]] && exit 2
        exit 1
        ;;
    apply)
        if [[ $ALL_APPLIED -eq 1 ]]; then
            echo "already applied: all ${#PATCHES[@]} patches in $TARGET/openrlhf (nothing to do)"
            exit 0
        fi
        [[ $N_CONFLICT -eq 0 ]] || conflict_error
        if [[ $N_APPLIED -gt 0 ]]; then
            echo "apply_patches.sh: $TARGET/openrlhf is partly patched; run --reverse first, or reinstall:" >&2
            report >&2
            exit 1
        fi
        commit_series forward
        echo "applied ${#PATCHES[@]} patches to $TARGET/openrlhf:"
        report | sed 's/not applied$/applied now/'
        ;;
    reverse)
        if [[ $N_PENDING -eq ${#PATCHES[@]} ]]; then
            echo "not applied: $TARGET/openrlhf has none of the patches (nothing to reverse)"
            exit 0
        fi
        if [[ $ALL_APPLIED -ne 1 ]]; then
            echo "apply_patches.sh: cannot reverse: $TARGET/openrlhf is not fully patched:" >&2
            report >&2
            exit 1
        fi
        commit_series reverse
        echo "reversed ${#PATCHES[@]} patches in $TARGET/openrlhf"
        ;;
esac
