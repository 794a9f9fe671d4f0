// runs_tools_info.go — the computer_info tool: the machine's record plus what a probe inside it finds.
//
// Entry point: toolComputerInfo (registered in toolCatalog, runs_tools.go).
// Rules: the probe is one exec through the computer service's Exec, under the agent's command policy and
// the run's exec timeout, like any shell call; it reads only (uname, id, /etc/os-release, /proc/meminfo,
// the cgroup's limits, df, command -v). A probe that fails or is refused still returns the record, with
// probeError saying why: the tool never ends the run.
package main

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// probeTools are the programs computer_info reports as present or missing.
var probeTools = []string{"git", "curl", "jq", "rg", "python3", "node", "go", "cargo", "make", "gcc"}

// infoProbe prints key=value lines; every part tolerates its source being absent (macOS, busybox).
func infoProbe() string {
	return `uname -s | sed 's/^/system=/'
sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null | tr -d '"' | sed 's/^/os=/'
sw_vers -productVersion 2>/dev/null | sed 's/^/macos=/'
uname -r | sed 's/^/kernel=/'
uname -m | sed 's/^/arch=/'
id -un 2>/dev/null | sed 's/^/user=/'
pwd | sed 's/^/workdir=/'
nproc 2>/dev/null | sed 's/^/cpus=/'
sysctl -n hw.ncpu 2>/dev/null | sed 's/^/cpus=/'
cat /sys/fs/cgroup/cpu.max 2>/dev/null | sed 's/^/cpuMax=/'
cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null | tr '\n' ' ' | sed 's/^/cpuMaxV1=/'; echo
sed -n 's/^MemTotal: *\([0-9]*\) kB/memTotalKb=\1/p; s/^MemAvailable: *\([0-9]*\) kB/memAvailableKb=\1/p' /proc/meminfo 2>/dev/null
sysctl -n hw.memsize 2>/dev/null | sed 's/^/memTotalBytes=/'
cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null | sed 's/^/memMax=/'
df -Pk . 2>/dev/null | awk 'NR==2 { print "diskTotalKb=" $2; print "diskFreeKb=" $4 }'
for t in ` + strings.Join(probeTools, " ") + `; do if command -v "$t" >/dev/null 2>&1; then echo "tool=$t"; fi; done
`
}

func toolComputerInfo(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	id, err := env.computer(ctx)
	if err != nil {
		return "", err
	}
	c := env.ar.rs.computers
	info, err := c.Get(ctx, id)
	if err != nil {
		return "", err
	}
	out := map[string]any{"id": info.ID, "name": info.Name, "provider": info.Provider, "state": info.State,
		"isolated": info.Isolated, "image": info.Image, "workdir": info.Workdir, "ports": info.Ports}
	if !info.Isolated {
		// The local provider maps /work and /tmp only for cwd and the file tools, not inside commands.
		out["note"] = "this computer is a guarded directory on the host, not a container: shell commands start in " +
			"the working directory, but an absolute /work or /tmp inside a command names the host's own directory; " +
			"use relative paths in commands (the file tools map /work and /tmp correctly)"
	}
	res, err := c.Exec(ctx, id, ExecRequest{Cmd: execCommand{Shell: infoProbe()}, TimeoutSec: min(env.ar.lim.ExecTimeoutSec, 30),
		MaxOutputBytes: 64 << 10, Policy: env.policy()}, nil)
	switch {
	case err != nil:
		out["probeError"] = asAPIError(err).Message
	case res.TimedOut:
		out["probeError"] = "the probe timed out"
	default:
		out["machine"] = parseInfoProbe(res.Stdout)
	}
	b, _ := json.Marshal(out)
	return string(b), nil
}

// parseInfoProbe turns the probe's key=value lines into the machine's description: sizes in MB, the
// cgroup's limits where they are tighter than the host's, and the tools present and missing.
func parseInfoProbe(text string) map[string]any {
	kv := map[string]string{}
	var present []string
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || v == "" {
			continue
		}
		if k == "tool" {
			present = append(present, v)
			continue
		}
		if _, seen := kv[k]; !seen {
			kv[k] = v
		}
	}
	num := func(k string) (float64, bool) {
		f, err := strconv.ParseFloat(kv[k], 64)
		return f, err == nil
	}
	m := map[string]any{}
	m["os"] = firstNonEmpty(kv["os"], kv["system"])
	if kv["os"] == "" && kv["macos"] != "" {
		m["os"] = "macOS " + kv["macos"]
	}
	for _, k := range []string{"kernel", "arch", "user", "workdir"} {
		m[k] = kv[k]
	}
	if n, ok := num("cpus"); ok {
		m["cpus"] = n
	}
	// cgroup v2's cpu.max is "QUOTA PERIOD" or "max PERIOD"; v1's quota is -1 without a limit. A quota
	// is a fractional CPU limit.
	for _, k := range []string{"cpuMax", "cpuMaxV1"} {
		f := strings.Fields(kv[k])
		if len(f) != 2 {
			continue
		}
		qf, err1 := strconv.ParseFloat(f[0], 64)
		pf, err2 := strconv.ParseFloat(f[1], 64)
		if err1 == nil && err2 == nil && qf > 0 && pf > 0 {
			m["cpuLimit"] = max(float64(int(qf/pf*100+0.5))/100, 0.01) // a sliver of a CPU is still a limit
			break
		}
	}
	mem := map[string]any{}
	if n, ok := num("memTotalKb"); ok {
		mem["totalMb"] = int(n / 1024)
	} else if n, ok := num("memTotalBytes"); ok {
		mem["totalMb"] = int(n / (1 << 20))
	}
	if n, ok := num("memAvailableKb"); ok {
		mem["availableMb"] = int(n / 1024)
	}
	// v2 says "max" without a limit; v1 a huge number, so a limit is one below the machine's memory.
	if n, ok := num("memMax"); ok && (mem["totalMb"] == nil || int(n/(1<<20)) < mem["totalMb"].(int)) {
		mem["limitMb"] = int(n / (1 << 20))
	}
	if len(mem) > 0 {
		m["memory"] = mem
	}
	if n, ok := num("diskFreeKb"); ok {
		m["diskFreeMb"] = int(n / 1024)
	}
	if n, ok := num("diskTotalKb"); ok {
		m["diskTotalMb"] = int(n / 1024)
	}
	missing := []string{}
	for _, t := range probeTools {
		if !slices.Contains(present, t) {
			missing = append(missing, t)
		}
	}
	if present == nil {
		present = []string{}
	}
	m["tools"] = map[string]any{"present": present, "missing": missing}
	return m
}
