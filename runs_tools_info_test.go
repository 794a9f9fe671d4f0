package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// computer_info probes the machine itself, through the exec path and its policy: what it reports agrees
// with what shell finds on the same machine, and a docker machine's cgroup limits show.
func TestComputerInfoProbesTheMachine(t *testing.T) {
	for _, prov := range []string{"local", "docker"} {
		t.Run(prov, func(t *testing.T) {
			var machine map[string]any
			if prov == "docker" {
				machine = map[string]any{"cpus": 1.5, "memoryMb": 1024}
			}
			env := machineToolHarness(t, prov, nil, machine)
			out, err := runTool(t, env, "computer_info", map[string]any{})
			if err != nil {
				t.Fatal(err)
			}
			var info struct {
				ID, Provider string
				ProbeError   string `json:"probeError"`
				Machine      struct {
					OS, Kernel, Arch, User, Workdir string
					CPUs                            float64 `json:"cpus"`
					CPULimit                        float64 `json:"cpuLimit"`
					Memory                          struct{ TotalMb, AvailableMb, LimitMb int }
					DiskFreeMb                      int `json:"diskFreeMb"`
					Tools                           struct{ Present, Missing []string }
				}
			}
			if err := json.Unmarshal([]byte(out), &info); err != nil || info.ProbeError != "" {
				t.Fatalf("%v: %s", err, out)
			}
			sh := func(cmd string) string {
				t.Helper()
				o, err := runTool(t, env, "shell", map[string]any{"command": cmd})
				if err != nil {
					t.Fatal(err)
				}
				return strings.TrimSpace(strings.Split(o, "\n[exit")[0])
			}
			mi := info.Machine
			if info.ID == "" || mi.Kernel != sh("uname -r") || mi.Arch != sh("uname -m") || mi.User != sh("id -un 2>/dev/null") ||
				mi.OS == "" || mi.Workdir == "" || mi.CPUs < 1 || mi.Memory.TotalMb < 64 || mi.DiskFreeMb < 1 {
				t.Fatalf("probe: %s", out)
			}
			if len(mi.Tools.Present)+len(mi.Tools.Missing) != len(probeTools) {
				t.Fatalf("tools: %+v", mi.Tools)
			}
			for _, tool := range probeTools {
				has := strings.HasSuffix(sh("command -v "+tool+" >/dev/null 2>&1 && echo yes || echo no"), "yes")
				if has != strings.Contains(" "+strings.Join(mi.Tools.Present, " ")+" ", " "+tool+" ") {
					t.Errorf("tool %s: shell says present=%v, computer_info says %+v", tool, has, mi.Tools)
				}
			}
			if prov == "docker" && (mi.CPULimit != 1.5 || mi.Memory.LimitMb != 1024) {
				t.Fatalf("cgroup limits not seen: cpuLimit %v limitMb %d: %s", mi.CPULimit, mi.Memory.LimitMb, out)
			}

			// The probe is an exec like any other: the agent's denyCommands refuse it, and the record stays.
			env = machineToolHarness(t, prov, func(sp *AgentSpec) { sp.Guardrails.DenyCommands = []string{"uname"} }, machine)
			out, err = runTool(t, env, "computer_info", map[string]any{})
			if err != nil || !strings.Contains(out, `"probeError":"refused: command matches the agent's denyCommands pattern \"uname\""`) ||
				!strings.Contains(out, `"provider":"`+prov) || strings.Contains(out, `"machine"`) {
				t.Fatalf("refused probe: %s %v", out, err)
			}
		})
	}
}

func TestParseInfoProbe(t *testing.T) {
	v1 := parseInfoProbe("cpuMaxV1=150000 100000 \nmemTotalKb=4194304\nmemMax=9223372036854771712\n")
	if v1["cpuLimit"] != 1.5 || v1["memory"].(map[string]any)["limitMb"] != nil {
		t.Fatalf("cgroup v1: %+v", v1)
	}
	m := parseInfoProbe("system=Darwin\nmacos=14.5\nkernel=23.5.0\narch=arm64\ncpus=8\nmemTotalBytes=17179869184\ncpuMax=max 100000\nmemMax=max\ndiskFreeKb=2048\ntool=git\ntool=make\njunk\n=x\n")
	if m["os"] != "macOS 14.5" || m["cpus"] != 8.0 || m["memory"].(map[string]any)["totalMb"] != 16384 || m["diskFreeMb"] != 2 {
		t.Fatalf("%+v", m)
	}
	if _, ok := m["cpuLimit"]; ok {
		t.Fatalf("cpu.max max is no limit: %+v", m)
	}
	if _, ok := m["memory"].(map[string]any)["limitMb"]; ok {
		t.Fatalf("memory.max max is no limit: %+v", m)
	}
	tools := m["tools"].(map[string]any)
	if p := tools["present"].([]string); len(p) != 2 || len(tools["missing"].([]string)) != len(probeTools)-2 {
		t.Fatalf("tools %+v", tools)
	}
}
