// cli_test_cmd.go — `agentd test`: an agent's test cases (its spec's examples and NAME.test.yaml beside
// the spec) run as real runs on the server, one line per case, exit 1 on any failure; JUnit XML for CI
// systems, JSON for scripts, and recorded model answers (--record DIR, --replay DIR).
//
// Entry points: (*cli).test (a row of cliCommands, cli.go); testTargets; writeJUnit.
// Rules (docs/runs.md "Agent tests"): an argument that is a file or directory is tested from the files
// (the spec is sent, not stored); any other argument is the name of an agent stored on the server. A
// test file is checked here first: all its problems at once as FILE:LINE: path: message, before any run.
// Recordings are one JSON file per agent, DIR/<agent>.json, cases sorted by name, so a re-recording
// diffs cleanly; --replay sends them and the server answers every model call from them.
package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// testTarget is one agent to test: from files, or stored on the server.
type testTarget struct {
	agent     string
	specFile  string // "" for a stored agent
	testsFile string // "" when there is none
	body      map[string]any
}

// agentRecording is the file DIR/<agent>.json of --record and --replay.
type agentRecording struct {
	Agent string          `json:"agent"`
	Cases []caseRecording `json:"cases"`
}

// testOutcome is one agent's results (the --json output's elements).
type testOutcome struct {
	Agent      string       `json:"agent"`
	File       string       `json:"file,omitempty"`
	Passed     int          `json:"passed"`
	Failed     int          `json:"failed"`
	DurationMS int64        `json:"durationMs"`
	Error      *apiError    `json:"error,omitempty"` // the agent could not be tested at all
	Cases      []caseResult `json:"cases"`
}

func isTestFile(name string) bool {
	return strings.HasSuffix(name, ".test.yaml") || strings.HasSuffix(name, ".test.yml")
}

// testTargets turns the arguments into agents to test; problems found offline are printed and counted.
func (c *cli) testTargets(args []string) ([]testTarget, int, error) {
	var out []testTarget
	bad := 0
	seen := map[string]bool{}
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil {
			if !os.IsNotExist(err) || strings.ContainsAny(a, "/.") {
				return nil, 0, fmt.Errorf("%s: %v", a, err)
			}
			out = append(out, testTarget{agent: a, body: map[string]any{}})
			continue
		}
		files := []string{a}
		if fi.IsDir() {
			if files, err = specFiles([]string{a}); err != nil {
				return nil, 0, err
			}
			if len(files) == 0 {
				return nil, 0, fmt.Errorf("%s: no spec files (*.yaml, *.yml, *.json) in this directory", a)
			}
		} else if isTestFile(a) {
			base := strings.TrimSuffix(strings.TrimSuffix(a, ".yml"), ".yaml")
			base = strings.TrimSuffix(base, ".test")
			files = nil
			for _, ext := range []string{".yaml", ".yml", ".json"} {
				if _, err := os.Stat(base + ext); err == nil {
					files = append(files, base+ext)
					break
				}
			}
			if files == nil {
				return nil, 0, fmt.Errorf("%s: no spec beside it (%s.yaml)", a, base)
			}
		}
		for _, f := range files {
			if seen[f] {
				continue
			}
			seen[f] = true
			t, ok := c.fileTarget(f)
			if !ok {
				bad++
				continue
			}
			out = append(out, t)
		}
	}
	return out, bad, nil
}

// fileTarget reads a spec file and the test file beside it, printing every problem of either.
func (c *cli) fileTarget(file string) (testTarget, bool) {
	t := testTarget{specFile: file, body: map[string]any{}}
	b, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", file, err)
		return t, false
	}
	var spec *AgentSpec
	var issues []string
	if strings.EqualFold(filepath.Ext(file), ".json") {
		spec, issues = parseSpecJSON(b)
		t.body["spec"] = json.RawMessage(b)
	} else {
		spec, issues = parseSpecYAML(string(b))
		t.body["yaml"] = string(b)
	}
	for _, is := range issues {
		fmt.Fprintf(c.stderr, "%s: %s\n", file, is)
	}
	if spec == nil {
		return t, false
	}
	t.agent = spec.Name
	base := strings.TrimSuffix(file, filepath.Ext(file))
	for _, ext := range []string{".test.yaml", ".test.yml"} {
		if tb, err := os.ReadFile(base + ext); err == nil {
			t.testsFile = base + ext
			_, tis := parseAgentTests(string(tb))
			for _, is := range tis {
				fmt.Fprintf(c.stderr, "%s:%d: %s\n", t.testsFile, is.Line, issueLine(is.Path, is.Msg))
			}
			if len(tis) > 0 {
				return t, false
			}
			t.body["tests"] = string(tb)
			break
		}
	}
	return t, true
}

func (c *cli) test(args []string) error {
	var parallel int
	var junit, record, replay string
	pos, err := c.flags(args, func(fs *flag.FlagSet) {
		c.jsonFlag(fs)
		fs.IntVar(&parallel, "parallel", 2, "")
		fs.StringVar(&junit, "junit", "", "")
		fs.StringVar(&record, "record", "", "")
		fs.StringVar(&replay, "replay", "", "")
	}, 1, -1)
	if err != nil {
		return err
	}
	if parallel < 1 || parallel > 16 {
		return c.usage("--parallel must be between 1 and 16")
	}
	if record != "" && replay != "" {
		return c.usage("--record and --replay cannot be used together")
	}
	targets, bad, err := c.testTargets(pos)
	if err != nil {
		return err
	}
	var outcomes []testOutcome
	passed, failed := 0, 0
	for _, t := range targets {
		o := c.testOne(t, parallel, record, replay)
		outcomes = append(outcomes, o)
		passed += o.Passed
		failed += o.Failed
		if o.Error != nil {
			bad++
		}
	}
	if c.asJSON {
		c.printJSON(map[string]any{"passed": passed, "failed": failed, "agents": outcomes})
	} else {
		fmt.Fprintf(c.stdout, "%d passed, %d failed\n", passed, failed)
	}
	if junit != "" {
		if err := writeJUnit(junit, outcomes); err != nil {
			return err
		}
	}
	if failed > 0 || bad > 0 {
		msg := fmt.Sprintf("%d of %d cases failed", failed, passed+failed)
		if bad > 0 {
			msg += fmt.Sprintf("; %d agent(s) could not be tested", bad)
		}
		return exitCode{code: 1, msg: msg}
	}
	return nil
}

// testOne tests one agent on the server, printing a line per case as it finishes.
func (c *cli) testOne(t testTarget, parallel int, record, replay string) testOutcome {
	o := testOutcome{Agent: t.agent, File: t.specFile, Cases: []caseResult{}}
	start := time.Now()
	defer func() { o.DurationMS = time.Since(start).Milliseconds() }()
	fail := func(err error) testOutcome {
		o.Error = asAPIError(err)
		label := firstNonEmpty(t.specFile, t.agent)
		fmt.Fprintf(c.stderr, "%s: %s\n", label, o.Error.Message)
		if ae := o.Error; ae.Details != nil {
			if issues, ok := ae.Details["issues"].([]any); ok {
				for _, is := range issues {
					fmt.Fprintf(c.stderr, "%s: %v\n", firstNonEmpty(t.testsFile, label), is)
				}
			}
		}
		return o
	}
	body := t.body
	body["parallel"] = parallel
	if record != "" {
		body["record"] = true
	}
	if replay != "" {
		file := filepath.Join(replay, t.agent+".json")
		b, err := os.ReadFile(file)
		if err != nil {
			return fail(errorf(codeSpecInvalid, "no recording for agent %s: %v", t.agent, err).withHint("make one with agentd test --record " + replay))
		}
		var rec agentRecording
		if err := json.Unmarshal(b, &rec); err != nil {
			return fail(errorf(codeSpecInvalid, "%s is not a recording: %v", file, err))
		}
		body["replay"] = rec.Cases
	}
	_, err := c.stream("POST", "/v1/agents/"+url.PathEscape(t.agent)+"/test", body, func(ev cliEvent) error {
		var f struct {
			Type string     `json:"type"`
			Case caseResult `json:"case"`
		}
		if json.Unmarshal(ev.data, &f) != nil || f.Type != "case" {
			return nil
		}
		o.Cases = append(o.Cases, f.Case)
		if f.Case.OK {
			o.Passed++
		} else {
			o.Failed++
		}
		if !c.asJSON {
			c.printCase(t.agent, f.Case)
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	sort.Slice(o.Cases, func(i, j int) bool { return o.Cases[i].Name < o.Cases[j].Name }) // they arrive as they finish
	if record != "" {
		if err := writeRecording(record, t.agent, o.Cases); err != nil {
			return fail(err)
		}
	}
	for i := range o.Cases {
		o.Cases[i].Exchanges = nil
	}
	return o
}

func (c *cli) printCase(agent string, r caseResult) {
	cost := fmt.Sprintf("%d steps, $%.4f, %.1fs", r.Steps, r.CostUSD, float64(r.DurationMS)/1000)
	if r.OK {
		fmt.Fprintf(c.stdout, "%s %s › %s (%s)\n", c.paint("32", "PASS"), agent, r.Name, cost)
		return
	}
	fmt.Fprintf(c.stdout, "%s %s › %s: %s (%s)\n", c.paint("31", "FAIL"), agent, r.Name, strings.Join(r.Reasons, "; "), cost)
}

// writeRecording writes DIR/<agent>.json with the cases' exchanges, sorted by case name.
func writeRecording(dir, agent string, cases []caseResult) error {
	rec := agentRecording{Agent: agent, Cases: []caseRecording{}}
	for _, r := range cases {
		rec.Cases = append(rec.Cases, caseRecording{Case: r.Name, Exchanges: r.Exchanges})
	}
	sort.Slice(rec.Cases, func(i, j int) bool { return rec.Cases[i].Case < rec.Cases[j].Case })
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, agent+".json"), append(b, '\n'), 0o644)
}

// ---- JUnit XML ----

// The JUnit XML shape CI systems read (the Ant/Jenkins schema): testsuites > testsuite > testcase, a
// failed case with a <failure message> and its reasons as the text, an agent that could not be tested
// as one <error> case.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Errors    int         `xml:"errors,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Time      string      `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	File      string      `xml:"file,attr,omitempty"`
	Cases     []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

func seconds(ms int64) string { return fmt.Sprintf("%.3f", float64(ms)/1000) }

func junitReport(outcomes []testOutcome, now time.Time) junitSuites {
	all := junitSuites{Name: "agentd test", Suites: []junitSuite{}}
	var total int64
	for _, o := range outcomes {
		s := junitSuite{Name: o.Agent, File: o.File, Time: seconds(o.DurationMS), Timestamp: now.UTC().Format("2006-01-02T15:04:05")}
		for _, r := range o.Cases {
			jc := junitCase{Name: r.Name, Classname: "agentd." + o.Agent, Time: seconds(r.DurationMS)}
			if r.RunID != "" {
				jc.SystemOut = "run " + r.RunID + ", stopReason " + r.StopReason
			}
			if !r.OK {
				jc.Failure = &junitProblem{Message: firstNonEmpty(strings.Join(r.Reasons, "; "), "failed"), Type: "AgentTestFailure", Text: strings.Join(r.Reasons, "\n")}
				s.Failures++
			}
			s.Cases = append(s.Cases, jc)
		}
		if o.Error != nil {
			s.Cases = append(s.Cases, junitCase{Name: "(agent)", Classname: "agentd." + o.Agent, Time: "0.000",
				Error: &junitProblem{Message: o.Error.Message, Type: o.Error.Code, Text: o.Error.Message}})
			s.Errors++
		}
		s.Tests = len(s.Cases)
		all.Tests += s.Tests
		all.Failures += s.Failures
		all.Errors += s.Errors
		total += o.DurationMS
		all.Suites = append(all.Suites, s)
	}
	all.Time = seconds(total)
	return all
}

func writeJUnit(file string, outcomes []testOutcome) error {
	b, err := xml.MarshalIndent(junitReport(outcomes, time.Now()), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, append([]byte(xml.Header), append(b, '\n')...), 0o644); err != nil {
		return errors.New("--junit: " + err.Error())
	}
	return nil
}
