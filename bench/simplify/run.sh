#!/usr/bin/env bash
# Issue 27's before/after: builds agentd at two revisions (git archive into a temp dir, the README's
# `go build`) and measures both in one run, interleaved, against a real engine (bench/simplify/main.go):
# exec `true` over the API p50/p99 (n=200), 20 concurrent execs p50/p99 and wall, 100 MB through exec SSE
# (MB/s), create → first exec from the warm pool and cold.
#
#   bench/simplify/run.sh BEFORE_REV AFTER_REV [flags of main.go: -n 200 -rounds 10 -streams 3 -creates 5 -provider docker -image agentd-test:bookworm]
#
# The same revision twice (run.sh REV REV) shows the noise floor of the host: on a busy one the ratios of
# identical binaries swing well past 10%; raise -n, -rounds and -creates there.
# Needs the engine and the image (.ci/run's computers block makes both). CGO_ENABLED=0 in the environment
# builds static binaries instead of the README's build.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_REV AFTER_REV [flags]" >&2; exit 2; }
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
before=$(git -C "$repo" rev-parse --short "$1^{commit}")
after=$(git -C "$repo" rev-parse --short "$2^{commit}")
shift 2
work=$(mktemp -d /tmp/agentd-simplify-bench.XXXXXX)
chmod 755 "$work" # the engine mounts each binary into its machines as the helper
trap 'rm -rf "$work"' EXIT
for side in before after; do
  rev=${!side}
  mkdir -p "$work/src-$side"
  git -C "$repo" archive "$rev" | tar -x -C "$work/src-$side"
  echo "== building $side ($rev: $(git -C "$repo" log -1 --format=%s "$rev" | cut -c1-80))"
  (cd "$work/src-$side" && go build -o "$work/agentd-$side" .)
  echo "   non-test Go lines: $(cd "$work/src-$side" && cat $(ls *.go | grep -v _test.go) | wc -l)"
done
cd "$repo/bench/simplify"
go run . -before "$work/agentd-before" -after "$work/agentd-after" \
  -before-label "before ($before)" -after-label "after ($after)" "$@"
