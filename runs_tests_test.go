package main

// Agent tests (issue 31): the test file's strict validation, POST /v1/agents/{name}/test on a real server
// with a scripted model on loopback (cases, reasons, fresh computers destroyed, record with secrets
// scrubbed, replay with no provider, a changed persona failing readably), and `agentd test` on the
// shipped examples with their recorded answers, offline, with valid JUnit XML.

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestAgentTestFileIssues(t *testing.T) {
	text := "examples: maybe\ncases:\n  - input: hi\n    expect:\n      contans: x\n      maxSteps: 0\n      matches: '('\n" +
		"  - name: twice\n    input: a\n  - name: twice\n    input: b\n  - vars: {a: [1]}\nextra: 1\n"
	_, issues := parseAgentTests(text)
	got := strings.Join(issueStrings(issues), "\n")
	for _, want := range []string{
		"examples: Expected boolean, received string (line 1)",
		`cases.0.expect.contans: Unrecognized key "contans"; did you mean contains? (line 5)`,
		"cases.0.expect.maxSteps: Expected a whole number of at least 1 (line 6)",
		"cases.0.expect.matches: invalid regular expression",
		`cases.2.name: case name "twice" is also case 1's`,
		"cases.3.vars.a: Expected string, received array (line 12)",
		"cases.3.input: Required (line 12)",
		`extra: Unrecognized key "extra"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing issue %q in:\n%s", want, got)
		}
	}
	if len(issues) != 8 {
		t.Errorf("%d issues, want 8:\n%s", len(issues), got)
	}
	for _, bad := range []string{"", "[1, 2]", "cases: &a [x]\nother: *a\n", "cases: {input: x}", ": :"} {
		if f, is := parseAgentTests(bad); f != nil || len(is) == 0 {
			t.Errorf("%q: accepted (%v)", bad, is)
		}
	}
	f, is := parseAgentTests("examples: false\ncases:\n  - input: '  what is   up  '\n    vars: {n: 3}\n    expect: {contains: [a, b], stopReason: step_limit, maxCostUsd: 0, files: {x.txt: y}}\n")
	if len(is) > 0 || *f.Examples || f.Cases[0].Name != "what is up" || f.Cases[0].Vars["n"] != "3" ||
		len(f.Cases[0].Expect.Contains) != 2 || *f.Cases[0].Expect.MaxCostUSD != 0 || f.Cases[0].Expect.Files["x.txt"] != "y" {
		t.Fatalf("%+v %v", f, is)
	}
}

func FuzzAgentTestFile(f *testing.F) {
	f.Add("cases:\n  - input: hi\n    expect: {contains: hi}\n")
	f.Add("examples: false\ncases: []\n")
	f.Fuzz(func(t *testing.T, text string) {
		file, issues := parseAgentTests(text)
		if (file == nil) == (len(issues) == 0) {
			t.Fatalf("file %v with issues %v", file, issues)
		}
		if file != nil {
			for _, c := range file.Cases {
				if strings.TrimSpace(c.Input) == "" || c.Name == "" {
					t.Fatalf("a case without input or name passed: %+v", c)
				}
			}
		}
	})
}

// testFrames posts to the test endpoint and returns its frames (an error frame fails the test).
func testFrames(t *testing.T, te *testServer, agent string, body any) (cases []caseResult, end map[string]any) {
	t.Helper()
	st := te.sse("POST", "/v1/agents/"+agent+"/test", body)
	defer st.close()
	for _, f := range st.all() {
		switch f["type"] {
		case "case":
			var c caseResult
			b, _ := json.Marshal(f["case"])
			json.Unmarshal(b, &c)
			cases = append(cases, c)
		case "test_end":
			end = f
		case "error":
			t.Fatalf("error frame: %v", f)
		}
	}
	if end == nil {
		t.Fatalf("no test_end frame")
	}
	return cases, end
}

func caseByName(t *testing.T, cases []caseResult, name string) caseResult {
	t.Helper()
	for _, c := range cases {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no case %q in %+v", name, cases)
	return caseResult{}
}

func TestAgentTestEndpoint(t *testing.T) {
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		last := r.Messages[len(r.Messages)-1]
		switch {
		case strings.Contains(last.text(), "write the file"):
			return scriptReply{calls: []ToolCall{tc("w1", "write_file", map[string]any{"path": "out/answer.txt", "content": "forty-two\n"})}}
		case last.Role == "tool":
			return scriptReply{text: "Wrote out/answer.txt."}
		case strings.Contains(last.text(), "capital"):
			return scriptReply{text: "The capital of France is Paris."}
		}
		return scriptReply{text: "I do not know."}
	})
	te := newE2E(t, so, "", func(c *testSetup) { c.ComputerProvider = "local" })
	persona := "You answer briefly. Never reveal " + e2eKey + "."
	spec := map[string]any{"name": "quiz", "model": "openai/gpt-4o-mini", "persona": persona, "tools": []string{"files"},
		"examples": []any{map[string]any{"user": "What is the capital of France?", "assistant": "PARIS"}}}
	tests := "cases:\n" +
		"  - name: writes\n    input: please write the file\n    expect: {toolsCalled: write_file, files: {out/answer.txt: Forty-Two}, maxSteps: 2}\n" +
		"  - name: wrong\n    input: what is the answer?\n    expect: {contains: '42', toolsCalled: shell, notContains: know, maxSteps: 0.5}\n"
	if r := te.do("POST", "/v1/agents/quiz/test", map[string]any{"spec": spec, "tests": tests}); r.status != 422 ||
		!strings.Contains(string(r.body), "cases.1.expect.maxSteps: Expected a whole number of at least 1 (line 7)") {
		t.Fatalf("an invalid test file: %d %s", r.status, r.body)
	}
	tests = strings.Replace(tests, ", maxSteps: 0.5", "", 1)
	cases, end := testFrames(t, te, "quiz", map[string]any{"spec": spec, "tests": tests, "record": true, "parallel": 3})
	if len(cases) != 3 || end["passed"] != 2.0 || end["failed"] != 1.0 {
		t.Fatalf("cases %+v end %v", cases, end)
	}
	ex := caseByName(t, cases, "example: What is the capital of France?")
	wr := caseByName(t, cases, "writes")
	bad := caseByName(t, cases, "wrong")
	if !ex.OK || !wr.OK || bad.OK || wr.Steps != 2 || len(wr.Exchanges) != 2 || wr.RunID == "" {
		t.Fatalf("example %+v\nwrites %+v\nwrong %+v", ex, wr, bad)
	}
	reasons := strings.Join(bad.Reasons, "\n")
	for _, want := range []string{`the answer does not contain "42"; it was "I do not know."`, "tool shell was not called (called: none)", `the answer contains "know"`} {
		if !strings.Contains(reasons, want) {
			t.Errorf("reasons lack %q:\n%s", want, reasons)
		}
	}
	// Each case had its own computer, destroyed after.
	var comps struct{ Computers []ComputerInfo }
	te.call("GET", "/v1/computers?all=true", nil, 200, &comps)
	if len(comps.Computers) != 0 {
		t.Fatalf("computers left behind: %+v", comps.Computers)
	}
	// The recording is scrubbed: the key in the persona is not in it.
	rec, _ := json.Marshal(wr.Exchanges)
	if bytes.Contains(rec, []byte(e2eKey)) || !bytes.Contains(rec, []byte("[REDACTED]")) {
		t.Fatalf("recording not scrubbed: %s", rec)
	}
	// Replay: the same answers with no provider call at all.
	replay := []caseRecording{}
	for _, c := range cases {
		replay = append(replay, caseRecording{Case: c.Name, Exchanges: c.Exchanges})
	}
	before := len(so.requests())
	cases2, end2 := testFrames(t, te, "quiz", map[string]any{"spec": spec, "tests": tests, "replay": replay})
	if end2["passed"] != 2.0 || len(so.requests()) != before {
		t.Fatalf("replay: %+v %v; provider calls %d → %d", cases2, end2, before, len(so.requests()))
	}
	// A changed persona: the replay says what changed.
	spec["persona"] = "You answer at length."
	cases3, _ := testFrames(t, te, "quiz", map[string]any{"spec": spec, "tests": tests, "replay": replay, "only": []string{"writes"}})
	if len(cases3) != 1 || cases3[0].OK || !strings.Contains(cases3[0].Reasons[0],
		`E_MODEL_UNAVAILABLE: replay: model call 1 no longer matches the recording: the system prompt differs: at character 12, recorded "You answer briefly.`) {
		t.Fatalf("changed persona: %+v", cases3)
	}
	// A stored agent: its examples are its cases; the last report is kept for the dashboard.
	te.createAgent(map[string]any{"name": "quiz", "persona": persona, "examples": spec["examples"]})
	te.createAgent(map[string]any{"name": "fresh"})
	if r := te.do("GET", "/v1/agents/fresh/test", nil).json(t); r["report"] != nil {
		t.Fatalf("a report before any test: %v", r)
	}
	testFrames(t, te, "quiz", nil)
	var last struct{ Report testReport }
	te.call("GET", "/v1/agents/quiz/test", nil, 200, &last)
	if last.Report.Passed != 1 || len(last.Report.Cases) != 1 || last.Report.Cases[0].Exchanges != nil {
		t.Fatalf("last report %+v", last.Report)
	}
	// An agent that asks before writing: a case with approve answers at once, either way.
	asking := map[string]any{"name": "asker", "model": "openai/gpt-4o-mini", "tools": []string{"files"},
		"guardrails": map[string]any{"approvalMode": "ask"}}
	cases4, _ := testFrames(t, te, "asker", map[string]any{"spec": asking, "examples": false, "tests": "cases:\n" +
		"  - {name: yes, input: please write the file, approve: true, expect: {files: {out/answer.txt: forty}}}\n" +
		"  - {name: no, input: please write the file, approve: false, expect: {files: {out/answer.txt: forty}}}\n"})
	if yes, no := caseByName(t, cases4, "yes"), caseByName(t, cases4, "no"); !yes.OK || no.OK ||
		!strings.Contains(strings.Join(no.Reasons, ";"), "file out/answer.txt: ") {
		t.Fatalf("approvals: %+v", cases4)
	}
	// Deleting the agent deletes its report: an agent made again under the name has none.
	te.call("DELETE", "/v1/agents/quiz", nil, 204, nil)
	te.createAgent(map[string]any{"name": "quiz", "persona": persona, "examples": spec["examples"]})
	if r := te.do("GET", "/v1/agents/quiz/test", nil).json(t); r["report"] != nil {
		t.Fatalf("a report of the deleted agent: %v", r)
	}
	te.wantError("GET", "/v1/agents/nobody/test", nil, 404, "E_AGENT_NOT_FOUND")
	te.wantError("POST", "/v1/agents/nobody/test", nil, 404, "E_AGENT_NOT_FOUND")
	te.wantError("POST", "/v1/agents/quiz/test", map[string]any{"examples": false}, 422, "E_SPEC_INVALID")
	te.wantError("POST", "/v1/agents/quiz/test", map[string]any{"spec": map[string]any{"name": "other"}}, 422, "E_SPEC_INVALID")
	te.wantError("POST", "/v1/agents/quiz/test", map[string]any{"bogus": 1}, 422, "E_SPEC_INVALID")
}

// junitShape is what CI systems read of a JUnit file.
type junitShape struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Time     string `xml:"time,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			Time      string `xml:"time,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// agentdTest runs the agentd binary's test command against a server.
func agentdTest(t *testing.T, url string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(cliBinary(t), append([]string{"test"}, args...)...)
	cmd.Env = []string{"AGENT_URL=" + url, "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NO_COLOR=1"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cliResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// testComputerConfig is the config.yaml of a served binary whose machines honour the examples' network
// rules (the coder's egress allow list): docker with the test image, else the bubblewrap sandbox.
func testComputerConfig(t *testing.T) string {
	t.Helper()
	images := fmt.Sprintf("images: {base: %q, python: %q, node: %q, full: %q}\n", testImage, testImage, testImage, testImage)
	switch {
	case os.Getenv("AGENT_TEST_DOCKER") == "1":
		return "computerProvider: docker\n" + images
	case os.Getenv("AGENT_TEST_SANDBOX") == "1":
		return "computerProvider: sandbox\n"
	}
	t.Skip("the examples' tests need machines that honour network rules: set AGENT_TEST_DOCKER=1 (with the test image, scripts/test-image.sh) or AGENT_TEST_SANDBOX=1")
	return ""
}

// offlineServe serves the agentd binary with no model provider at all (keys unset, the keyless ones at a
// closed port) and machines on the local provider.
func offlineServe(t *testing.T) *testServer {
	ts, _ := serveBinary(t, cliBinary(t), t.TempDir(), testComputerConfig(t),
		"OPENAI_API_KEY=", "ANTHROPIC_API_KEY=", "GEMINI_API_KEY=", "OPENAI_BASE_URL=",
		"OLLAMA_HOST=http://127.0.0.1:1", "OLLAMA_BASE_URL=http://127.0.0.1:1", "LMSTUDIO_BASE_URL=http://127.0.0.1:1", "LMSTUDIO_HOST=http://127.0.0.1:1")
	return ts
}

// TestAgentTestExamplesOffline: `agentd test` on the shipped examples passes from their recorded answers
// with no provider; a changed persona fails with a readable reason; --junit writes valid JUnit XML.
func TestAgentTestExamplesOffline(t *testing.T) {
	ts := offlineServe(t)
	junit := filepath.Join(t.TempDir(), "junit.xml")
	r := agentdTest(t, ts.url, "--replay", "examples/recordings", "--junit", junit, "examples/")
	if r.code != 0 || !strings.Contains(r.stdout, "6 passed, 0 failed") {
		t.Fatalf("agentd test on examples/:\n%s", r)
	}
	for _, want := range []string{"PASS triager › example: {", "PASS coder › looks at /work without changing it", "PASS reporter › writes the status note"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("no line %q:\n%s", want, r.stdout)
		}
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var j junitShape
	if err := xml.Unmarshal(b, &j); err != nil || !bytes.HasPrefix(b, []byte("<?xml")) {
		t.Fatalf("not XML (%v):\n%s", err, b)
	}
	if j.Tests != 6 || j.Failures != 0 || len(j.Suites) != 5 {
		t.Fatalf("junit totals: %+v", j)
	}
	for _, s := range j.Suites {
		if s.Name == "" || s.Time == "" || s.Tests != len(s.Cases) || s.Tests == 0 {
			t.Errorf("suite %+v", s)
		}
		for _, c := range s.Cases {
			if c.Name == "" || c.Classname != "agentd."+s.Name || c.Time == "" || c.Failure != nil {
				t.Errorf("case %+v", c)
			}
		}
	}

	// A persona changed in a way that breaks the triager's cases.
	dir := t.TempDir()
	spec, _ := os.ReadFile("examples/triager.yaml")
	tests, _ := os.ReadFile("examples/triager.test.yaml")
	changed := strings.Replace(string(spec), "Answer with three lines", "Answer in one paragraph", 1)
	if changed == string(spec) {
		t.Fatal("the triager's persona changed; update this test")
	}
	os.WriteFile(filepath.Join(dir, "triager.yaml"), []byte(changed), 0o644)
	os.WriteFile(filepath.Join(dir, "triager.test.yaml"), tests, 0o644)
	r = agentdTest(t, ts.url, "--replay", "examples/recordings", "--junit", junit, "--parallel", "1", filepath.Join(dir, "triager.yaml"))
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL triager › a feature request is labelled feature: the run ended error, expected complete: "+
		"E_MODEL_UNAVAILABLE: replay: model call 1 no longer matches the recording: the system prompt differs: at character") ||
		!strings.Contains(r.stdout, `recorded …"ve a GitHub issue event as JSON. Answer with three lines: a one-sentence summary, a\nsuggested label "…, now …"ve a GitHub issue event as JSON. Answer in one paragraph:`) ||
		!strings.Contains(r.stdout, "0 passed, 2 failed") {
		t.Fatalf("a changed persona:\n%s", r)
	}
	b, _ = os.ReadFile(junit)
	var jf junitShape
	if err := xml.Unmarshal(b, &jf); err != nil || jf.Failures != 2 || jf.Suites[0].Cases[0].Failure == nil ||
		!strings.Contains(jf.Suites[0].Cases[0].Failure.Message, "no longer matches the recording") {
		t.Fatalf("junit of the failure (%v):\n%s", err, b)
	}
	// A stored agent by name: this server has none of that name; usage mistakes are exit 2.
	r = agentdTest(t, ts.url, "--json", "ghost")
	var out struct {
		Failed int
		Agents []testOutcome
	}
	if r.code != 1 || json.Unmarshal([]byte(r.stdout), &out) != nil || len(out.Agents) != 1 || out.Agents[0].Error == nil ||
		out.Agents[0].Error.Code != codeAgentNotFound || !strings.Contains(r.stderr, `ghost: agent "ghost" not found`) {
		t.Fatalf("an unknown agent:\n%s", r)
	}
	if r = agentdTest(t, ts.url, "--record", "x", "--replay", "y", "ghost"); r.code != 2 {
		t.Fatalf("--record with --replay:\n%s", r)
	}
	// A broken test file is reported offline, with its lines, before any run.
	os.WriteFile(filepath.Join(dir, "triager.test.yaml"), []byte("cases:\n  - input: x\n    expect: {contain: y}\n"), 0o644)
	r = agentdTest(t, ts.url, filepath.Join(dir, "triager.yaml"))
	if r.code != 1 || !strings.Contains(r.stderr, "triager.test.yaml:3: cases.0.expect.contain: Unrecognized key \"contain\"; did you mean contains?") {
		t.Fatalf("a broken test file:\n%s", r)
	}
}

// TestAgentTestRecordExamples makes examples/recordings: `agentd test --record` against a scripted model
// on loopback that answers each shipped case the way the case wants (no real provider is involved; the
// recordings pin the requests agentd makes, which is what a changed persona or tool set breaks). Run it
// with AGENT_RECORD_EXAMPLES=1 after changing an example.
func TestAgentTestRecordExamples(t *testing.T) {
	if os.Getenv("AGENT_RECORD_EXAMPLES") != "1" {
		t.Skip("AGENT_RECORD_EXAMPLES=1 re-records examples/recordings")
	}
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		first, last := "", r.Messages[len(r.Messages)-1]
		for _, m := range r.Messages {
			if m.Role == "user" {
				first = m.text()
			}
		}
		after := last.Role == "tool"
		switch {
		case strings.Contains(first, "Crash on an empty config.yaml"):
			return scriptReply{text: "agentd serve panics when its config.yaml is empty.\nbug\n2"}
		case strings.Contains(first, "--watch flag"):
			return scriptReply{text: "Asks for a --watch flag on agentd logs to keep following runs.\nfeature\n3"}
		case strings.Contains(first, "What files are in /work") && !after:
			return scriptReply{calls: []ToolCall{tc("c1", "list_dir", map[string]any{"path": "/work"})}}
		case strings.Contains(first, "What files are in /work"):
			return scriptReply{text: "/work is empty: there are no files yet. I changed nothing."}
		case strings.Contains(first, "status note") && !after:
			return scriptReply{calls: []ToolCall{tc("c1", "write_file", map[string]any{"path": "reports/status.md", "content": "# Status\n\n- No reports yet.\n"})}}
		case strings.Contains(first, "status note"):
			return scriptReply{text: "Wrote the note to /work/reports/status.md: no reports yet."}
		case strings.Contains(first, "capital of France"):
			return scriptReply{text: "Paris."}
		case strings.Contains(first, "6 times 7") && !after:
			return scriptReply{calls: []ToolCall{tc("c1", "shell", map[string]any{"command": "echo $((6*7))"})}}
		case strings.Contains(first, "6 times 7"):
			return scriptReply{text: "6 times 7 is 42."}
		}
		return scriptReply{text: "unscripted"}
	})
	// A self-hosted OpenAI-compatible server (OPENAI_BASE_URL, no key) serving one model the catalog does
	// not price: the local-helper's `model: local` with maxCostUsd 0 can use it, like a user's vLLM.
	selfHosted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/models") {
			io.WriteString(w, `{"object":"list","data":[{"id":"qwen2.5-coder-7b-instruct","object":"model"}]}`)
			return
		}
		so.Config.Handler.ServeHTTP(w, r)
	}))
	defer selfHosted.Close()
	ts, _ := serveBinary(t, cliBinary(t), t.TempDir(), testComputerConfig(t),
		"OPENAI_API_KEY=", "ANTHROPIC_API_KEY=", "GEMINI_API_KEY=", "OPENAI_BASE_URL="+selfHosted.URL,
		"OLLAMA_HOST=http://127.0.0.1:1", "OLLAMA_BASE_URL=http://127.0.0.1:1", "LMSTUDIO_BASE_URL=http://127.0.0.1:1", "LMSTUDIO_HOST=http://127.0.0.1:1")
	os.RemoveAll("examples/recordings")
	if r := agentdTest(t, ts.url, "--record", "examples/recordings", "examples/"); r.code != 0 {
		t.Fatalf("recording:\n%s", r)
	} else {
		t.Logf("%s", r.stdout)
	}
}
