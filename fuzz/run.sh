#!/usr/bin/env bash
# fuzz/run.sh TARGET SECONDS: builds the target if needed (fuzz/build.sh) and
# fuzzes it for SECONDS from the seed corpus fuzz/corpus/TARGET/, copied to a
# temporary working corpus so the repository is never modified. Exits
# non-zero on a crash, leak, timeout or sanitizer report; the reproducer
# (crash-*, leak-*, timeout-*) is kept in build/fuzz/artifacts/TARGET/.
#
#   bash fuzz/run.sh npy 30          # targets: npy checkpoint gguf vocab tokenizer model cli
#
# One fuzzing process in the foreground (no -jobs/-workers, which would only
# wrap it in a supervisor and send its log to fuzz-0.log). Extra libFuzzer
# flags may follow.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: fuzz/run.sh TARGET SECONDS [libFuzzer flags...]" >&2
  exit 2
fi
target="$1"
seconds="$2"
shift 2
root="$(cd "$(dirname "$0")/.." && pwd)"
seeds="$root/fuzz/corpus/$target"
[ -d "$seeds" ] || { echo "fuzz/run.sh: no seed corpus $seeds" >&2; exit 2; }

bash "$root/fuzz/build.sh" "$target"

work="$(mktemp -d "${TMPDIR:-/tmp}/qkv-fuzz-$target.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp -r "$seeds/." "$work/"
artifacts="$root/build/fuzz/artifacts/$target"
mkdir -p "$artifacts"

echo "fuzz/run.sh: $target for ${seconds}s, working corpus $work"
"$root/build/fuzz/fuzz_$target" -max_total_time="$seconds" \
  -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$@" "$work"
