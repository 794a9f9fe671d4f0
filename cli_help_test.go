package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Issue 26 item 8: `agentd CMD --help` has one line per flag of every command, with what it does, its
// values and its default; the flags listed are the ones the command parses (its own FlagSet).
func TestCLIHelpEveryFlag(t *testing.T) {
	for _, cmd := range cliCommands() {
		var out bytes.Buffer
		if err := run(context.Background(), []string{cmd.name, "--help"}, func(string) string { return "" }, &out, &out); err != nil {
			t.Fatalf("%s --help: %v", cmd.name, err)
		}
		help := out.String()
		if !strings.HasPrefix(help, "usage: agentd "+cmd.name) || !strings.Contains(help, "example: "+cmd.example) {
			t.Errorf("%s --help: no usage or example:\n%s", cmd.name, help)
		}
		// The command's own flags, as it parses them.
		c := &cli{ctx: context.Background(), getenv: func(string) string { return "" }, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, cmd: cmd, help: true}
		if err := cmd.run(c, nil); err != errHelped && c.fs != nil {
			t.Errorf("%s in help mode: %v", cmd.name, err)
		}
		if c.fs == nil {
			continue
		}
		c.fs.VisitAll(func(f *flag.Flag) {
			dash := "--"
			if len(f.Name) == 1 {
				dash = "-"
			}
			var line string
			for _, l := range strings.Split(help, "\n") {
				if strings.HasPrefix(l, "  "+dash+f.Name+" ") || l == "  "+dash+f.Name {
					if line != "" {
						t.Errorf("%s --help: two lines for %s%s", cmd.name, dash, f.Name)
					}
					line = l
				}
			}
			doc := strings.TrimSpace(strings.TrimPrefix(line, "  "+dash+f.Name))
			switch {
			case line == "":
				t.Errorf("%s --help: no line for %s%s:\n%s", cmd.name, dash, f.Name, help)
			case len(doc) < 12 || !strings.Contains(doc, "(default"):
				t.Errorf("%s --help: the line for %s%s does not say what it does and its default: %q", cmd.name, dash, f.Name, line)
			}
		})
	}
	// validate, serve and mcp answer --help too.
	for _, name := range []string{"serve", "validate", "mcp"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{name, "--help"}, func(string) string { return "" }, &out, &out); err != nil || !strings.Contains(out.String(), "usage: agentd "+name) {
			t.Errorf("%s --help: %v %s", name, err, out.String())
		}
	}
}

// An unknown command or flag is one line naming the nearest one.
func TestCLIDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"agnets"}, "unknown command \"agnets\"; did you mean `agentd agents`?"},
		{[]string{"serv"}, "did you mean `agentd serve`?"},
		{[]string{"hlep"}, "did you mean `agentd help`?"},
		{[]string{"help", "staus"}, "did you mean `agentd start`?"},
		{[]string{"runs", "--stauts", "complete"}, "runs: unknown flag --stauts; did you mean --status?"},
		{[]string{"ps", "-jsn"}, "ps: unknown flag --jsn; did you mean --json?"},
		{[]string{"logs", "--follow"}, "logs: unknown flag --follow"},
		{[]string{"xyzzyplugh"}, "unknown command \"xyzzyplugh\" (`agentd help` lists the commands)"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, func(string) string { return "http://127.0.0.1:1" }, &stdout, &stderr)
		code := exitStatus(err, false, &stderr)
		got := stderr.String()
		if code != 2 || strings.Count(got, "\n") != 1 || !strings.Contains(got, tc.want) {
			t.Errorf("agentd %v: exit %d, want one line with %q:\n%s", tc.args, code, tc.want, got)
		}
	}
	if got := nearest("xyzzy", []string{"ps", "rm"}); got != "" {
		t.Errorf("nearest of a word like no command: %q", got)
	}
}

// Hints the CLI prints name CLI commands, not HTTP routes: every literal hint of the server that names
// a /v1 route comes out of cliHint without one.
func TestCLIHintsNameCommands(t *testing.T) {
	files, _ := os.ReadDir(".")
	lit := regexp.MustCompile(`withHint\((?:fmt\.Sprintf\()?"((?:[^"\\]|\\.)*)"`)
	n := 0
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".go") || strings.HasSuffix(f.Name(), "_test.go") {
			continue
		}
		b, _ := os.ReadFile(f.Name())
		src := regexp.MustCompile(`"\s*\+\s*[\w.]+\s*\+\s*"`).ReplaceAllString(string(b), "NAME") // "a" + x + "b"
		for _, m := range lit.FindAllStringSubmatch(src, -1) {
			h := strings.ReplaceAll(m[1], "%s", "cmp_x")
			if !strings.Contains(h, " /v1/") && !strings.Contains(h, "(GET /v1") {
				continue
			}
			n++
			if got := cliHint(h); strings.Contains(got, "/v1/") {
				t.Errorf("%s: the CLI would print an HTTP route: %q", f.Name(), got)
			}
		}
	}
	if n < 10 {
		t.Fatalf("found only %d hints naming a route: the scan is broken", n)
	}
	if got := cliHint("start it with POST /v1/computers/cmp_1/start"); got != "start it with `agentd start cmp_1`" {
		t.Errorf("cliHint: %q", got)
	}
}
