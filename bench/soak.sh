#!/usr/bin/env bash
# Soak: agentd under mixed load on loopback (runs, execs, file transfers, event sockets, slow clients),
# sampling the server's RSS, threads, descriptors and goroutines (from GET /metrics) every 10 s. Default 30 minutes; it stops by itself.
#   bench/soak.sh                      # local provider, 30 minutes
#   bench/soak.sh -duration 2m -provider docker -image agentd-test:bookworm
set -euo pipefail
cd "$(dirname "$0")/soak"
exec go run . "$@"
