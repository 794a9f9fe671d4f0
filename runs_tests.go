// runs_tests.go — agent tests: the test file beside a spec (NAME.test.yaml), the cases it and the spec's
// examples make, running each case as a real run on its own fresh computer, the checks of a case's
// result, and the endpoints POST /v1/agents/{name}/test (an SSE stream of case results) and
// GET /v1/agents/{name}/test (the last results, for the dashboard).
//
// Entry points: parseAgentTests(text) → (*agentTestFile, []testIssue); agentTestCases(spec, file,
// examples); server.runAgentTests; the two handlers. The CLI side is cli_test_cmd.go; recorded model
// answers are runs_replay.go.
// Rules (docs/runs.md "Agent tests"): the test file is validated strictly, every problem at once, each
// with its dotted path and line; the spec's examples are cases (their answer must be contained,
// case-insensitively) unless the file or the request says `examples: false`; every case must end
// `complete` unless its expect.stopReason says otherwise; text checks are case-insensitive except
// `matches` (a Go regular expression); a case's `approve` answers its run's approvals at once, else they
// wait like any run's. A case whose agent has a computer and a tool that needs it (or that checks files)
// gets a machine of its own, created for it and destroyed after, even when the request goes away; runs
// are ordinary runs (trigger `test`), recorded like any other. Each agent's last report is kept in the
// store (agent_tests), removed with the agent.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// agentTestFile is a parsed NAME.test.yaml.
type agentTestFile struct {
	Examples *bool // nil: the spec's examples count as cases
	Cases    []testCase
}

// testCase is one case: an input and what its run must show.
type testCase struct {
	Name    string            `json:"name"`
	Input   string            `json:"input"`
	Vars    map[string]string `json:"vars,omitempty"`
	Approve *bool             `json:"approve,omitempty"` // answer the run's approvals at once (nil: like any run)
	Expect  caseExpect        `json:"expect"`
	Example bool              `json:"example,omitempty"` // made from one of the spec's examples
}

type caseExpect struct {
	Contains       []string          `json:"contains,omitempty"`
	NotContains    []string          `json:"notContains,omitempty"`
	Matches        []string          `json:"matches,omitempty"`
	ToolsCalled    []string          `json:"toolsCalled,omitempty"`
	ToolsNotCalled []string          `json:"toolsNotCalled,omitempty"`
	StopReason     string            `json:"stopReason,omitempty"`
	MaxSteps       int               `json:"maxSteps,omitempty"`
	MaxCostUSD     *float64          `json:"maxCostUsd,omitempty"`
	Files          map[string]string `json:"files,omitempty"`
}

// testIssue is one problem of a test file.
type testIssue struct {
	Line int
	Path string
	Msg  string
}

func (i testIssue) String() string {
	if i.Line > 0 {
		return fmt.Sprintf("%s (line %d)", issueLine(i.Path, i.Msg), i.Line)
	}
	return issueLine(i.Path, i.Msg)
}

func issueStrings(issues []testIssue) []string {
	out := make([]string, len(issues))
	for i, is := range issues {
		out[i] = is.String()
	}
	return out
}

var stopReasons = []string{"complete", "step_limit", "budget", "timeout", "aborted", "loop", "error"}

const maxTestFileBytes = 1 << 20

// parseAgentTests validates a test file strictly and reports every problem at once.
func parseAgentTests(text string) (*agentTestFile, []testIssue) {
	if len(text) > maxTestFileBytes {
		return nil, []testIssue{{Msg: fmt.Sprintf("the test file is larger than %d bytes", maxTestFileBytes)}}
	}
	if yamlNodeBound(text) > 2*maxSpecNodes {
		return nil, []testIssue{{Msg: "the test file has too many values to check safely"}}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, []testIssue{{Msg: "Invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	p := &testParser{}
	f := &agentTestFile{}
	if len(doc.Content) == 0 {
		return nil, []testIssue{{Msg: "the test file is empty; it needs cases (or examples: true and a spec with examples)"}}
	}
	root := doc.Content[0]
	if p.noAliases(root, "") && p.kind(root, "", yaml.MappingNode, "an object") {
		p.fields(root, "", map[string]func(*yaml.Node, string){
			"examples": func(n *yaml.Node, at string) {
				if b, ok := p.boolean(n, at); ok {
					f.Examples = &b
				}
			},
			"cases": func(n *yaml.Node, at string) {
				if !p.kind(n, at, yaml.SequenceNode, "a list of cases") {
					return
				}
				names := map[string]int{}
				for i, c := range n.Content {
					tc, ok := p.testCase(c, joinPath(at, strconv.Itoa(i)))
					if !ok {
						continue
					}
					if prev, dup := names[tc.Name]; dup {
						p.add(c, joinPath(at, strconv.Itoa(i))+".name", fmt.Sprintf("case name %q is also case %d's; give each case its own name", tc.Name, prev))
					}
					names[tc.Name] = i
					f.Cases = append(f.Cases, tc)
				}
			},
		})
	}
	if len(p.issues) > 0 {
		return nil, p.issues
	}
	return f, nil
}

type testParser struct{ issues []testIssue }

func (p *testParser) add(n *yaml.Node, at, msg string) {
	p.issues = append(p.issues, testIssue{Line: n.Line, Path: at, Msg: msg})
}

func (p *testParser) noAliases(n *yaml.Node, at string) bool {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		p.add(n, at, "YAML anchors and aliases are not supported; write the value out")
		return false
	}
	for _, c := range n.Content {
		if !p.noAliases(c, at) {
			return false
		}
	}
	return true
}

func nodeKind(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "object"
	case n.Kind == yaml.SequenceNode:
		return "array"
	case n.ShortTag() == "!!null":
		return "null"
	case n.ShortTag() == "!!bool":
		return "boolean"
	case n.ShortTag() == "!!int" || n.ShortTag() == "!!float":
		return "number"
	}
	return "string"
}

func (p *testParser) kind(n *yaml.Node, at string, k yaml.Kind, want string) bool {
	if n.Kind != k {
		p.add(n, at, fmt.Sprintf("Expected %s, received %s", want, nodeKind(n)))
		return false
	}
	return true
}

// fields walks an object's keys: each known key to its reader, every unknown one an issue.
func (p *testParser) fields(n *yaml.Node, at string, known map[string]func(*yaml.Node, string)) map[string]bool {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := joinPath(at, k.Value)
		read, ok := known[k.Value]
		switch {
		case !ok:
			names := sortedKeys(known)
			msg := fmt.Sprintf("Unrecognized key %q (accepted: %s)", k.Value, strings.Join(names, ", "))
			if near := nearest(k.Value, names); near != "" {
				msg = fmt.Sprintf("Unrecognized key %q; did you mean %s?", k.Value, near)
			}
			p.add(k, key, msg)
		case seen[k.Value]:
			p.add(k, key, "duplicate key")
		default:
			seen[k.Value] = true
			read(v, key)
		}
	}
	return seen
}

func (p *testParser) str(n *yaml.Node, at string) (string, bool) {
	if n.Kind != yaml.ScalarNode || nodeKind(n) != "string" {
		p.add(n, at, "Expected string, received "+nodeKind(n))
		return "", false
	}
	return n.Value, true
}

func (p *testParser) boolean(n *yaml.Node, at string) (bool, bool) {
	var b bool
	if n.Kind != yaml.ScalarNode || nodeKind(n) != "boolean" || n.Decode(&b) != nil {
		p.add(n, at, "Expected boolean, received "+nodeKind(n))
		return false, false
	}
	return b, true
}

func (p *testParser) number(n *yaml.Node, at string) (float64, bool) {
	var f float64
	if n.Kind != yaml.ScalarNode || nodeKind(n) != "number" || n.Decode(&f) != nil {
		p.add(n, at, "Expected number, received "+nodeKind(n))
		return 0, false
	}
	return f, true
}

// strings reads one string or a list of them.
func (p *testParser) strs(n *yaml.Node, at string) []string {
	if n.Kind == yaml.SequenceNode {
		var out []string
		for i, c := range n.Content {
			if s, ok := p.str(c, joinPath(at, strconv.Itoa(i))); ok {
				out = append(out, s)
			}
		}
		return out
	}
	if s, ok := p.str(n, at); ok {
		return []string{s}
	}
	return nil
}

func (p *testParser) stringMap(n *yaml.Node, at string) map[string]string {
	if !p.kind(n, at, yaml.MappingNode, "an object") {
		return nil
	}
	out := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind != yaml.ScalarNode || nodeKind(v) == "null" {
			p.add(v, joinPath(at, k.Value), "Expected string, received "+nodeKind(v))
			continue
		}
		out[k.Value] = v.Value // numbers and booleans are taken as their text, as run vars are
	}
	return out
}

func (p *testParser) testCase(n *yaml.Node, at string) (testCase, bool) {
	var c testCase
	if !p.kind(n, at, yaml.MappingNode, "an object (a case)") {
		return c, false
	}
	before := len(p.issues)
	seen := p.fields(n, at, map[string]func(*yaml.Node, string){
		"name": func(v *yaml.Node, k string) {
			if s, ok := p.str(v, k); ok && strings.TrimSpace(s) == "" {
				p.add(v, k, "String must contain at least 1 character(s)")
			} else {
				c.Name = strings.TrimSpace(s)
			}
		},
		"input": func(v *yaml.Node, k string) {
			if s, ok := p.str(v, k); ok && strings.TrimSpace(s) == "" {
				p.add(v, k, "the case's input is empty")
			} else {
				c.Input = s
			}
		},
		"vars": func(v *yaml.Node, k string) { c.Vars = p.stringMap(v, k) },
		"approve": func(v *yaml.Node, k string) {
			if b, ok := p.boolean(v, k); ok {
				c.Approve = &b
			}
		},
		"expect": func(v *yaml.Node, k string) { c.Expect = p.expect(v, k) },
	})
	if !seen["input"] {
		p.add(n, joinPath(at, "input"), "Required")
	}
	if c.Name == "" {
		c.Name = caseNameOf(c.Input)
	}
	return c, len(p.issues) == before
}

func (p *testParser) expect(n *yaml.Node, at string) caseExpect {
	var e caseExpect
	if !p.kind(n, at, yaml.MappingNode, "an object") {
		return e
	}
	p.fields(n, at, map[string]func(*yaml.Node, string){
		"contains":    func(v *yaml.Node, k string) { e.Contains = p.strs(v, k) },
		"notContains": func(v *yaml.Node, k string) { e.NotContains = p.strs(v, k) },
		"matches": func(v *yaml.Node, k string) {
			e.Matches = p.strs(v, k)
			for _, re := range e.Matches {
				if _, err := regexp.Compile(re); err != nil {
					p.add(v, k, fmt.Sprintf("invalid regular expression %q: %v", re, err))
				}
			}
		},
		"toolsCalled":    func(v *yaml.Node, k string) { e.ToolsCalled = p.strs(v, k) },
		"toolsNotCalled": func(v *yaml.Node, k string) { e.ToolsNotCalled = p.strs(v, k) },
		"stopReason": func(v *yaml.Node, k string) {
			if s, ok := p.str(v, k); ok {
				if !slices.Contains(stopReasons, s) {
					p.add(v, k, fmt.Sprintf("Invalid enum value. Expected %s, received '%s'", strings.Join(stopReasons, " | "), s))
				}
				e.StopReason = s
			}
		},
		"maxSteps": func(v *yaml.Node, k string) {
			if f, ok := p.number(v, k); ok {
				if f < 1 || f != float64(int(f)) {
					p.add(v, k, "Expected a whole number of at least 1")
				}
				e.MaxSteps = int(f)
			}
		},
		"maxCostUsd": func(v *yaml.Node, k string) {
			if f, ok := p.number(v, k); ok {
				if f < 0 {
					p.add(v, k, "Number must be greater than or equal to 0")
				}
				e.MaxCostUSD = &f
			}
		},
		"files": func(v *yaml.Node, k string) {
			e.Files = p.stringMap(v, k)
			for file := range e.Files {
				if strings.TrimSpace(file) == "" {
					p.add(v, k, "a file path is empty")
				}
			}
		},
	})
	return e
}

// caseNameOf names a case without a name after its input (the key of its recording).
func caseNameOf(input string) string {
	return clip(strings.Join(strings.Fields(input), " "), 60)
}

// agentTestCases is what a test run runs: the spec's examples (unless turned off: the request's
// examples wins over the file's), then the file's cases. A file case with an example's name replaces it.
func agentTestCases(spec *AgentSpec, f *agentTestFile, examples *bool) []testCase {
	useExamples := true
	if f != nil && f.Examples != nil {
		useExamples = *f.Examples
	}
	if examples != nil {
		useExamples = *examples
	}
	var out []testCase
	if useExamples {
		for _, ex := range spec.Examples {
			out = append(out, testCase{Name: "example: " + caseNameOf(ex.User), Input: ex.User, Example: true,
				Expect: caseExpect{Contains: []string{strings.TrimSpace(ex.Assistant)}}})
		}
	}
	if f != nil {
		for _, c := range f.Cases {
			out = slices.DeleteFunc(out, func(o testCase) bool { return o.Name == c.Name })
			out = append(out, c)
		}
	}
	return out
}

// ---- checking a case ----

// caseResult is one case's outcome (a `case` frame of the test stream).
type caseResult struct {
	Name        string          `json:"name"`
	OK          bool            `json:"ok"`
	Reasons     []string        `json:"reasons"`
	RunID       string          `json:"runId,omitempty"`
	StopReason  string          `json:"stopReason,omitempty"`
	Steps       int             `json:"steps"`
	CostUSD     float64         `json:"costUsd"`
	DurationMS  int64           `json:"durationMs"`
	Text        string          `json:"text,omitempty"`
	ToolsCalled []string        `json:"toolsCalled,omitempty"`
	Exchanges   []modelExchange `json:"exchanges,omitempty"`
}

// toolsCalledIn lists the tools a run's messages called, in first-call order.
func toolsCalledIn(msgs []ModelMessage) []string {
	var out []string
	for _, m := range msgs {
		for _, p := range m.Content {
			if p.Type == "tool_call" && !slices.Contains(out, p.Name) {
				out = append(out, p.Name)
			}
		}
	}
	return out
}

// check returns why a finished run fails the case (none: it passes). files reads a file of the case's
// computer.
func (c testCase) check(res *RunResult, files func(path string) (string, error)) []string {
	var why []string
	want := firstNonEmpty(c.Expect.StopReason, "complete")
	if res.StopReason != want {
		msg := fmt.Sprintf("the run ended %s, expected %s", res.StopReason, want)
		if res.Error != nil {
			// The run failed outright (a replay that no longer matches, a provider down): that is the
			// reason; what its empty answer lacks would only bury it.
			return []string{msg + ": " + res.Error.Code + ": " + res.Error.Message}
		}
		why = append(why, msg)
	}
	text := res.Text
	lower := strings.ToLower(text)
	shown := fmt.Sprintf("%q", clip(strings.Join(strings.Fields(text), " "), 160))
	for _, s := range c.Expect.Contains {
		if !strings.Contains(lower, strings.ToLower(s)) {
			why = append(why, fmt.Sprintf("the answer does not contain %q; it was %s", s, shown))
		}
	}
	for _, s := range c.Expect.NotContains {
		if strings.Contains(lower, strings.ToLower(s)) {
			why = append(why, fmt.Sprintf("the answer contains %q; it was %s", s, shown))
		}
	}
	for _, re := range c.Expect.Matches {
		if rx, err := regexp.Compile(re); err == nil && !rx.MatchString(text) {
			why = append(why, fmt.Sprintf("the answer does not match /%s/; it was %s", re, shown))
		}
	}
	called := toolsCalledIn(res.Messages)
	for _, t := range c.Expect.ToolsCalled {
		if !slices.Contains(called, t) {
			why = append(why, fmt.Sprintf("tool %s was not called (called: %s)", t, orNone(called)))
		}
	}
	for _, t := range c.Expect.ToolsNotCalled {
		if slices.Contains(called, t) {
			why = append(why, fmt.Sprintf("tool %s was called", t))
		}
	}
	if c.Expect.MaxSteps > 0 && res.Steps > c.Expect.MaxSteps {
		why = append(why, fmt.Sprintf("the run took %d steps, at most %d expected", res.Steps, c.Expect.MaxSteps))
	}
	if m := c.Expect.MaxCostUSD; m != nil && res.Usage.CostUSD > *m+1e-12 {
		why = append(why, fmt.Sprintf("the run cost $%.4f, at most $%.4f expected", res.Usage.CostUSD, *m))
	}
	for _, p := range sortedKeys(c.Expect.Files) {
		got, err := files(p)
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("file %s: %s", p, asAPIError(err).Message))
		case !strings.Contains(strings.ToLower(got), strings.ToLower(c.Expect.Files[p])):
			why = append(why, fmt.Sprintf("file %s does not contain %q", p, c.Expect.Files[p]))
		}
	}
	return why
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// ---- running cases ----

// testRunOptions says how a test run answers model calls and how many cases run at once.
type testRunOptions struct {
	Parallel int
	Record   bool
	Replay   map[string][]modelExchange // by case name; nil: the model providers
}

// runAgentTests runs the cases, at most o.Parallel at once, calling emit (safe for concurrent calls)
// with each result as it is known. Results come back in case order.
func (s *server) runAgentTests(ctx context.Context, spec *AgentSpec, cases []testCase, o testRunOptions, emit func(caseResult)) []caseResult {
	out := make([]caseResult, len(cases))
	slots := make(chan struct{}, max(o.Parallel, 1))
	var wg sync.WaitGroup
	for i, c := range cases {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			out[i] = s.runCase(ctx, spec, c, o)
			emit(out[i])
		})
	}
	wg.Wait()
	return out
}

func (s *server) runCase(ctx context.Context, spec *AgentSpec, c testCase, o testRunOptions) (res caseResult) {
	start := time.Now()
	res = caseResult{Name: c.Name, Reasons: []string{}}
	defer func() {
		res.OK = len(res.Reasons) == 0
		res.DurationMS = time.Since(start).Milliseconds()
	}()
	// Memory is off for a case: it must not see another case's turns, or a real user's (nor leave its own).
	cs := *spec
	cs.Memory.Enabled = false
	spec = &cs
	red := newRedactor(s.cfg.getenv)
	models := s.runs.models
	var rec *recordingModels
	switch {
	case o.Replay != nil:
		ex, ok := o.Replay[c.Name]
		if !ok {
			res.Reasons = append(res.Reasons, "replay: the recording has no case of this name (record it with agentd test --record DIR)")
			return res
		}
		models = newReplayModels(ex, red)
	case o.Record:
		rec = newRecordingModels(models, red)
		models = rec
	}
	// The case's own computer: created now, destroyed after whatever happens (a request going away too).
	compID := ""
	if spec.Computer.IsEnabled() && (needsMachine(s.runs, spec) || len(c.Expect.Files) > 0) {
		sp := spec.Computer
		sp.Enabled = nil
		sp.Name = spec.Name + "-test-" + strings.ToLower(randomChars(6))
		sp.Labels = map[string]string{"agentd-test": spec.Name}
		applyComputerDefaults(&sp)
		info, err := s.computers.create(ctx, sp, spec.Guardrails.policy())
		if err != nil {
			res.Reasons = append(res.Reasons, "the case's computer could not be created: "+asAPIError(err).Message)
			return res
		}
		compID = info.ID
		defer s.computers.destroy(context.WithoutCancel(ctx), compID, "")
	}
	input, _ := json.Marshal(c.Input)
	vars := make(map[string]any, len(c.Vars))
	for k, v := range c.Vars {
		vars[k] = v
	}
	p, err := prepareRun(spec, runBody{Input: input, Vars: vars})
	if err != nil {
		res.Reasons = append(res.Reasons, asAPIError(err).Message)
		return res
	}
	p.ComputerID, p.Trigger, p.Models = compID, "test", models
	var sink func(runEvent, []byte)
	if c.Approve != nil { // an unattended case answers its approvals (the entry exists before the event)
		sink = func(ev runEvent, _ []byte) {
			if ev.Type == "approval_required" {
				s.runs.approvals.answer(ev.ApprovalID, *c.Approve, false)
			}
		}
	}
	ar, err := s.runs.start(spec, p, sink)
	if err != nil {
		res.Reasons = append(res.Reasons, asAPIError(err).Message)
		return res
	}
	select {
	case <-ar.done:
	case <-ctx.Done():
		ar.cancel(errClientGone)
		<-ar.done
	}
	r := ar.result
	res.RunID, res.StopReason, res.Steps, res.CostUSD = r.RunID, r.StopReason, r.Steps, r.Usage.CostUSD
	res.Text, res.ToolsCalled = preview(r.Text), toolsCalledIn(r.Messages)
	res.Reasons = append(res.Reasons, c.check(r, func(file string) (string, error) {
		if compID == "" {
			return "", errors.New("the agent has no computer (computer.enabled is false)")
		}
		if !path.IsAbs(file) {
			file = path.Join(firstNonEmpty(spec.Computer.Workdir, "/work"), file)
		}
		b, err := s.computers.ReadFile(context.WithoutCancel(ctx), compID, file)
		return string(b), err
	})...)
	if rec != nil {
		res.Exchanges = rec.exchanges()
	}
	return res
}

// needsMachine: the agent has a computer and a tool that needs it (MCP tools never do).
func needsMachine(rs *runService, spec *AgentSpec) bool {
	return slices.ContainsFunc(resolveTools(spec, rs.getenv), func(name string) bool { return rs.tools[name].needsComputer })
}

// ---- the endpoints ----

// testBody is the body of POST /v1/agents/{name}/test; every key is optional.
type testBody struct {
	Spec     json.RawMessage `json:"spec"`
	YAML     *string         `json:"yaml"`
	Tests    *string         `json:"tests"`
	Examples *bool           `json:"examples"`
	Only     []string        `json:"only"`
	Parallel int             `json:"parallel"`
	Record   bool            `json:"record"`
	Replay   []caseRecording `json:"replay"`
}

// testReport is the last test run of an agent (GET /v1/agents/{name}/test, the dashboard).
type testReport struct {
	Agent      string       `json:"agent"`
	FinishedAt string       `json:"finishedAt"`
	Passed     int          `json:"passed"`
	Failed     int          `json:"failed"`
	Cases      []caseResult `json:"cases"`
}

// readTestRequest resolves the agent under test, its cases and the options, or a 4xx error.
func (s *server) readTestRequest(r *http.Request) (*AgentSpec, []testCase, testRunOptions, error) {
	var o testRunOptions
	name := r.PathValue("name")
	raw, err := readBody(r)
	if err != nil {
		return nil, nil, o, err
	}
	var b testBody
	if len(strings.TrimSpace(string(raw))) > 0 {
		if err := decodeBytes(raw, &b); err != nil {
			return nil, nil, o, err
		}
	}
	var spec *AgentSpec
	var issues []string
	switch {
	case len(b.Spec) > 0 && string(b.Spec) != "null" && b.YAML != nil:
		return nil, nil, o, errorf(codeSpecInvalid, "body has both spec and yaml; send one").withHint(`send {"spec": {...}} or {"yaml": "..."}, or neither to test the stored agent`)
	case len(b.Spec) > 0 && string(b.Spec) != "null":
		spec, issues = parseSpecJSON(b.Spec)
	case b.YAML != nil:
		spec, issues = parseSpecYAML(*b.YAML)
	default:
		if spec, err = s.loadAgent(r.Context(), name); err != nil {
			return nil, nil, o, err
		}
	}
	if len(issues) > 0 {
		return nil, nil, o, specIssuesError("agent spec", issues)
	}
	if spec.Name != name {
		return nil, nil, o, errorf(codeSpecInvalid, "spec.name %q does not match the path's agent %q", spec.Name, name).
			withHint("test the agent the spec names (" + spec.Name + "), or set its name to " + name)
	}
	var file *agentTestFile
	if b.Tests != nil {
		f, tis := parseAgentTests(*b.Tests)
		if len(tis) > 0 {
			e := specIssuesError("test file", issueStrings(tis))
			return nil, nil, o, e.withHint("fix every line of details.issues; `agentd validate NAME.test.yaml` checks a test file offline")
		}
		file = f
	}
	cases := agentTestCases(spec, file, b.Examples)
	if len(b.Only) > 0 {
		cases = slices.DeleteFunc(cases, func(c testCase) bool { return !slices.Contains(b.Only, c.Name) })
	}
	if len(cases) == 0 {
		return nil, nil, o, errorf(codeSpecInvalid, "agent %q has no test cases", name).
			withHint("add examples to the spec, or send a test file (tests) with cases; see docs/runs.md")
	}
	if b.Parallel < 0 || b.Parallel > 16 {
		return nil, nil, o, errorf(codeSpecInvalid, "parallel: Number must be between 1 and 16, received %d", b.Parallel)
	}
	if b.Record && b.Replay != nil {
		return nil, nil, o, errorf(codeSpecInvalid, "record and replay cannot be used together")
	}
	o = testRunOptions{Parallel: cmp.Or(b.Parallel, 2), Record: b.Record}
	if b.Replay != nil {
		o.Replay = make(map[string][]modelExchange, len(b.Replay))
		for _, rc := range b.Replay {
			o.Replay[rc.Case] = rc.Exchanges
		}
	}
	return spec, cases, o, nil
}

// handleTestAgent runs the cases and streams `test_start`, one `case` per case as it finishes, and
// `test_end`, then `event: done`. A client that goes away cancels the case runs (their computers are
// still destroyed).
func (s *server) handleTestAgent(w http.ResponseWriter, r *http.Request) error {
	spec, cases, o, err := s.readTestRequest(r)
	if err != nil {
		return err
	}
	sse := newSSE(w, ssePingEvery)
	defer sse.close()
	ctx, cancel := sse.bind(r.Context())
	defer cancel()
	start := time.Now()
	sse.send(map[string]any{"type": "test_start", "agent": spec.Name, "cases": len(cases)})
	results := s.runAgentTests(ctx, spec, cases, o, func(c caseResult) {
		sse.send(map[string]any{"type": "case", "case": c})
	})
	rep := testReport{Agent: spec.Name, FinishedAt: timestamp(time.Now()), Cases: make([]caseResult, len(results))}
	for i, c := range results {
		c.Exchanges = nil
		rep.Cases[i] = c
		if c.OK {
			rep.Passed++
		} else {
			rep.Failed++
		}
	}
	if b, err := json.Marshal(rep); err == nil {
		if err := s.store.PutAgentTestReport(context.WithoutCancel(ctx), rep.Agent, b); err != nil {
			s.log.Warn("cannot keep the test report", "agent", rep.Agent, "err", err)
		}
	}
	sse.send(map[string]any{"type": "test_end", "agent": spec.Name, "passed": rep.Passed, "failed": rep.Failed,
		"durationMs": time.Since(start).Milliseconds()})
	return nil
}

// handleLastTests answers the agent's last test report, or {report: null}.
func (s *server) handleLastTests(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if _, err := s.loadAgent(r.Context(), name); err != nil {
		return err
	}
	b, err := s.store.AgentTestReport(r.Context(), name)
	switch {
	case errors.Is(err, errNotFound):
		b = []byte("null")
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"report": json.RawMessage(b)})
	return nil
}
