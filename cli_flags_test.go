package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run's --var, --max-steps, --max-cost and --approve reach the run (and only tighten it); up's machine
// flags reach the machine's spec; exec's --cwd, --env and --timeout reach the command. Against the real
// server and the agentd binary.
func TestCLIRunUpExecFlags(t *testing.T) {
	so := cliModel(t)
	te := newE2E(t, so, "")
	te.agentdOK("apply", writeSpec(t, "name: greeter\nmodel: openai/gpt-4o-mini\npersona: Greet {{user}} from {{town}}.\ntools: [computer]\nlimits:\n  maxSteps: 5\n  maxCostUsd: 0.5\n"))

	// --var fills the persona's placeholders.
	if r := te.agentdOK("run", "--var", "user=Ana", "--var", "town=Oslo", "greeter", "hi"); !strings.Contains(r.stdout, "echo: hi") {
		t.Fatalf("run --var: %s", r)
	}
	reqs := so.requests()
	if sys := reqs[len(reqs)-1].all(); !strings.Contains(sys, "Greet Ana from Oslo.") {
		t.Fatalf("vars not in the persona: %s", sys)
	}
	// --max-steps lowers the ceiling; raising it is clamped with a warning.
	if r := te.agentd("", nil, "run", "--max-steps", "1", "greeter", "loop"); r.code != 1 || !strings.Contains(r.stderr, "ended: step_limit") {
		t.Fatalf("run --max-steps 1: %s", r)
	}
	if r := te.agentd("", nil, "run", "--json", "--max-steps", "900", "greeter", "hello"); r.code != 0 || !strings.Contains(r.stdout, "clamped to the spec's 5") {
		t.Fatalf("run --max-steps 900: %s", r)
	}
	// --max-cost 0: local models only, so the paid model is over budget.
	if r := te.agentd("", nil, "run", "--max-cost", "0", "greeter", "hello"); r.code != 1 || !strings.Contains(r.stderr, "ended: budget") {
		t.Fatalf("run --max-cost 0: %s", r)
	}
	// --approve readonly refuses the shell call; --approve auto cannot loosen an ask spec.
	te.agentd("", nil, "run", "--approve", "readonly", "greeter", "shell please")
	reqs = so.requests()
	if res := reqs[len(reqs)-1].toolResults(); len(res) != 1 || !strings.Contains(res[0].text(), "readonly mode refuses shell") {
		t.Fatalf("run --approve readonly: %+v", res)
	}
	te.agentdOK("apply", writeSpec(t, "name: careful\nmodel: openai/gpt-4o-mini\ntools: []\ncomputer: {enabled: false}\nguardrails:\n  approvalMode: ask\n"))
	if r := te.agentd("", nil, "run", "--json", "--approve", "auto", "careful", "hello"); !strings.Contains(r.stdout, `approvalMode \"auto\" ignored`) {
		t.Fatalf("run --approve auto on an ask spec: %s", r)
	}
	// Usage mistakes exit 2 naming the flag.
	for _, args := range [][]string{
		{"run", "--approve", "yolo", "greeter", "x"}, {"run", "--var", "novalue", "greeter", "x"},
		{"run", "--max-steps", "0", "greeter", "x"}, {"run", "--max-cost", "-1", "greeter", "x"},
		{"up", "--memory", "lots"}, {"up", "--network", "wide"}, {"up", "--env", "=x"},
		{"exec", "--timeout", "soon", "box", "--", "true"},
	} {
		if r := te.agentd("", nil, args...); r.code != 2 {
			t.Errorf("agentd %v: want exit 2, got %s", args, r)
		}
	}

	// up: the machine's spec carries every flag.
	var m ComputerInfo
	mustJSON(t, te.agentdOK("up", "--json", "--name", "box", "--cpus", "1.5", "--memory", "1g", "--disk", "512m", "--network", "full", "--persist", "--env", "A=B", "--env", "C=D=E").stdout, &m)
	sp := m.Spec
	if sp.CPUs != 1.5 || sp.MemoryMB != 1024 || sp.DiskMB != 512 || sp.Network.Mode != "full" || !sp.Persist || sp.Env["A"] != "B" || sp.Env["C"] != "D=E" {
		t.Fatalf("up spec: %+v", sp)
	}
	if e2eProvider() == "local" { // what local cannot honour is refused by the server, so the flags reached it
		if r := te.agentd("", nil, "up", "--package", "jq"); r.code != 1 || !strings.Contains(r.stderr, "packages") {
			t.Fatalf("up --package on local: %s", r)
		}
		if r := te.agentd("", nil, "up", "--network", "egress", "--allow", "example.com"); r.code != 1 || !strings.Contains(r.stderr, "network restrictions") {
			t.Fatalf("up --allow on local: %s", r)
		}
	} else {
		mustJSON(t, te.agentdOK("up", "--json", "--network", "egress", "--allow", "example.com", "--allow", "*.example.org").stdout, &m)
		if a := m.Spec.Network.Allow; len(a) != 2 || a[1] != "*.example.org" {
			t.Fatalf("up --allow: %+v", m.Spec.Network)
		}
		te.agentdOK("rm", m.ID)
	}

	// exec: --env reaches the command, --cwd sets its directory, --timeout stops it.
	if r := te.agentdOK("exec", "--env", "GREETING=hej", "--cwd", "/tmp", "box", "--", "sh", "-c", `echo "$GREETING" > greeting.txt; echo "$GREETING"`); r.stdout != "hej\n" {
		t.Fatalf("exec --env: %s", r)
	}
	back := filepath.Join(t.TempDir(), "g.txt")
	te.agentdOK("cp", "box:/tmp/greeting.txt", back)
	if b, _ := os.ReadFile(back); string(b) != "hej\n" {
		t.Fatalf("exec --cwd /tmp wrote %q", b)
	}
	if r := te.agentd("", nil, "exec", "--timeout", "1s", "box", "--", "sleep", "30"); r.code == 0 || !strings.Contains(r.stderr, "timed out") {
		t.Fatalf("exec --timeout: %s", r)
	}
}
