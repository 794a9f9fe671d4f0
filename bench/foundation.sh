#!/usr/bin/env bash
# Foundation benchmarks (issue 2): wrk on loopback against a real agentd, the time from process start to
# the first /health answer, idle RSS, and the Go benchmarks of spec validation.
# Usage: bash bench/foundation.sh   (needs wrk: apt-get install wrk; python3 for the start timer)
set -euo pipefail
cd "$(dirname "$0")/.."

DUR=${DUR:-10s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
PORT=${PORT:-17377}
work=$(mktemp -d)
pid=; bpid=
trap 'kill $pid $bpid 2>/dev/null || true; rm -rf "$work"' EXIT
base="http://127.0.0.1:$PORT"

go build -o "$work/agentd" .
(cd bench/baseline && go build -o "$work/baseline" .)
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"

# Time from process start to the first 200 on /health (median of 5 cold starts, each on a fresh AGENT_HOME).
python3 - "$work/agentd" "$PORT" <<'PY'
import os, subprocess, sys, time, urllib.request, statistics, tempfile
exe, port = sys.argv[1], sys.argv[2]
times = []
for _ in range(5):
    home = tempfile.mkdtemp()
    t0 = time.perf_counter()
    p = subprocess.Popen([exe, "serve", "--port", port], env={**os.environ, "AGENT_HOME": home},
                         stderr=subprocess.DEVNULL)
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            break
        except Exception:
            time.sleep(0.0005)
    times.append((time.perf_counter() - t0) * 1000)
    p.terminate(); p.wait()
print(f"ready: median {statistics.median(times):.1f} ms from process start to the first /health answer (runs: {', '.join(f'{t:.1f}' for t in times)})")
PY

AGENT_HOME="$work/home" "$work/agentd" serve --port "$PORT" 2>"$work/serve.log" &
pid=$!
until curl -fsS "$base/health" >/dev/null 2>&1; do sleep 0.01; done

sleep 1
echo "idle RSS: $(awk '/VmRSS/ {printf "%.1f MB", $2/1024}' /proc/$pid/status) (fresh server, no agents)"

for i in $(seq 1 100); do
  curl -fsS -X POST "$base/v1/agents" -H 'Content-Type: application/json' \
    -d "{\"yaml\": \"name: agent-$i\\ndescription: benchmark agent $i\\ntriggers:\\n  - type: http\\n\"}" >/dev/null
done
python3 -c 'import json,sys; print(json.dumps({"yaml": open("testdata/full-spec.yaml").read()}))' > "$work/body.json"
echo "RSS after creating 100 agents: $(awk '/VmRSS/ {printf "%.1f MB", $2/1024}' /proc/$pid/status)"

run() {
  echo "== $1"
  shift
  wrk -t"$THREADS" -c"$CONNS" -d"$DUR" --latency "$@" | grep -E 'Requests/sec|^ +(50|99)%|Non-2xx|Socket errors'
}
"$work/baseline" $((PORT + 1)) &
bpid=$!
until curl -fsS "http://127.0.0.1:$((PORT + 1))/health" >/dev/null 2>&1; do sleep 0.01; done
run "baseline: bare net/http GET /health (bench/baseline)" "http://127.0.0.1:$((PORT + 1))/health"
kill $bpid; bpid=
run "GET /health" "$base/health"
run "GET /v1/agents (100 agents)" "$base/v1/agents"
BODY_FILE="$work/body.json" run "POST /v1/agents/validate (full spec, YAML)" -s bench/validate.lua "$base/v1/agents/validate"
echo "idle RSS after the load: $(awk '/VmRSS/ {printf "%.1f MB", $2/1024}' /proc/$pid/status)"
echo "load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== Go benchmarks"
go test -run '^$' -bench 'ParseSpec|ListAgents' -benchtime=2s -count=3 . | grep -E '^Benchmark'
