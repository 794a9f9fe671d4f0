package main

// GET /metrics: a scrape after a request, an exec and a run, every line parsed against the text format
// 0.0.4 by a strict parser written here; counts moved, histograms cumulative; the token rule.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// ---- a strict parser of the Prometheus text format 0.0.4 ----

type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

type promFamily struct {
	name, typ, help string
	samples         []promSample
}

var (
	metricNameRe = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelNameRe  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// parseProm parses a whole exposition, failing on any line the grammar does not allow, and on the
// format's rules across lines: HELP and TYPE once per family, before its samples; a family's samples
// together; histogram series named _bucket (with le), _sum and _count.
func parseProm(t *testing.T, text string) map[string]*promFamily {
	t.Helper()
	if text == "" || !strings.HasSuffix(text, "\n") {
		t.Fatalf("exposition must end with a newline: %q", text)
	}
	fams := map[string]*promFamily{}
	var order []string
	closed := map[string]bool{} // families whose samples are over (another family's began)
	current := ""
	family := func(name string) *promFamily {
		f := fams[name]
		if f == nil {
			f = &promFamily{name: name}
			fams[name] = f
			order = append(order, name)
		}
		return f
	}
	for n, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("line %d %q: %s", n+1, line, fmt.Sprintf(format, args...))
		}
		if line == "" {
			fail("empty line")
		}
		if strings.HasPrefix(line, "#") {
			parts := strings.SplitN(line, " ", 4)
			if len(parts) < 3 || (parts[1] != "HELP" && parts[1] != "TYPE") {
				fail("a comment line this exposition should not have")
			}
			name := parts[2]
			if !metricNameRe.MatchString(name) {
				fail("bad metric name %q", name)
			}
			if closed[name] {
				fail("metadata after the family's samples ended")
			}
			f := family(name)
			if current != name && current != "" {
				closed[current] = true
			}
			current = name
			switch parts[1] {
			case "HELP":
				if f.help != "" || len(parts) < 4 {
					fail("HELP twice or empty")
				}
				if err := checkEscapes(parts[3], false); err != nil {
					fail("%v", err)
				}
				f.help = parts[3]
			case "TYPE":
				if f.typ != "" || len(parts) != 4 {
					fail("TYPE twice or malformed")
				}
				if len(f.samples) > 0 {
					fail("TYPE after samples")
				}
				switch parts[3] {
				case "counter", "gauge", "histogram", "summary", "untyped":
				default:
					fail("unknown type %q", parts[3])
				}
				f.typ = parts[3]
			}
			continue
		}
		s, err := parseSampleLine(line)
		if err != nil {
			fail("%v", err)
		}
		fam := s.name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base := strings.TrimSuffix(s.name, suf); base != s.name && fams[base] != nil && fams[base].typ == "histogram" {
				fam = base
			}
		}
		f := fams[fam]
		if f == nil || f.typ == "" || f.help == "" {
			fail("sample of %s before its HELP and TYPE", fam)
		}
		if current != fam || closed[fam] {
			fail("sample of %s outside its family's block", fam)
		}
		if f.typ == "histogram" {
			if s.name == fam {
				fail("a histogram sample must be _bucket, _sum or _count")
			}
			if _, ok := s.labels["le"]; (s.name == fam+"_bucket") != ok {
				fail("le belongs on _bucket samples only")
			}
		}
		f.samples = append(f.samples, s)
	}
	for _, name := range order {
		f := fams[name]
		if f.help == "" || f.typ == "" {
			t.Fatalf("family %s lacks HELP or TYPE", name)
		}
		if f.typ == "counter" && !strings.HasSuffix(name, "_total") {
			t.Fatalf("counter %s does not end in _total", name)
		}
		if f.typ == "histogram" {
			checkHistogram(t, f)
		}
	}
	return fams
}

// parseSampleLine reads `name{l="v",...} value [timestamp]`.
func parseSampleLine(line string) (promSample, error) {
	s := promSample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("no value")
	}
	s.name = line[:i]
	if !metricNameRe.MatchString(s.name) {
		return s, fmt.Errorf("bad metric name %q", s.name)
	}
	rest := line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq <= 0 {
				return s, fmt.Errorf("bad label at %q", rest)
			}
			name := rest[:eq]
			if !labelNameRe.MatchString(name) {
				return s, fmt.Errorf("bad label name %q", name)
			}
			if _, dup := s.labels[name]; dup {
				return s, fmt.Errorf("label %s twice", name)
			}
			rest = rest[eq+2:]
			var val strings.Builder
			closedQuote := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' {
					if j+1 >= len(rest) {
						return s, fmt.Errorf("dangling backslash")
					}
					switch rest[j+1] {
					case '\\':
						val.WriteByte('\\')
					case '"':
						val.WriteByte('"')
					case 'n':
						val.WriteByte('\n')
					default:
						return s, fmt.Errorf("bad escape \\%c", rest[j+1])
					}
					j++
					continue
				}
				if c == '"' {
					rest = rest[j+1:]
					closedQuote = true
					break
				}
				if c == '\n' {
					return s, fmt.Errorf("raw newline in a label value")
				}
				val.WriteByte(c)
			}
			if !closedQuote {
				return s, fmt.Errorf("unterminated label value")
			}
			s.labels[name] = val.String()
			if strings.HasPrefix(rest, ",") {
				rest = rest[1:]
			} else if !strings.HasPrefix(rest, "}") {
				return s, fmt.Errorf("expected , or } at %q", rest)
			}
		}
	}
	if !strings.HasPrefix(rest, " ") {
		return s, fmt.Errorf("expected a space before the value")
	}
	fields := strings.Split(rest[1:], " ")
	if len(fields) < 1 || len(fields) > 2 || fields[0] == "" {
		return s, fmt.Errorf("expected value [timestamp], got %q", rest)
	}
	v, err := parsePromFloat(fields[0])
	if err != nil {
		return s, err
	}
	s.value = v
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return s, fmt.Errorf("bad timestamp %q", fields[1])
		}
	}
	return s, nil
}

func parsePromFloat(v string) (float64, error) {
	switch v {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	if strings.ContainsAny(v, "_xXpP") || strings.EqualFold(v, "inf") || strings.EqualFold(v, "infinity") {
		return 0, fmt.Errorf("bad value %q", v)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("bad value %q", v)
	}
	return f, nil
}

// checkEscapes: in HELP only \\ and \n; in label values also \".
func checkEscapes(s string, quote bool) error {
	for j := 0; j < len(s); j++ {
		if s[j] != '\\' {
			continue
		}
		if j+1 >= len(s) {
			return fmt.Errorf("dangling backslash")
		}
		if c := s[j+1]; c != '\\' && c != 'n' && !(quote && c == '"') {
			return fmt.Errorf("bad escape \\%c", c)
		}
		j++
	}
	return nil
}

// checkHistogram: per series, buckets ascending in le and cumulative, a +Inf bucket equal to _count,
// and a _sum.
func checkHistogram(t *testing.T, f *promFamily) {
	t.Helper()
	type acc struct {
		les     []float64
		counts  []float64
		sum     bool
		count   float64
		counted bool
	}
	series := map[string]*acc{}
	key := func(l map[string]string) string {
		var parts []string
		for k, v := range l {
			if k != "le" {
				parts = append(parts, k+"="+v)
			}
		}
		sortStrings(parts)
		return strings.Join(parts, ",")
	}
	for _, s := range f.samples {
		k := key(s.labels)
		a := series[k]
		if a == nil {
			a = &acc{}
			series[k] = a
		}
		switch s.name {
		case f.name + "_bucket":
			le, err := parsePromFloat(s.labels["le"])
			if err != nil {
				t.Fatalf("%s: le %q", f.name, s.labels["le"])
			}
			a.les, a.counts = append(a.les, le), append(a.counts, s.value)
		case f.name + "_sum":
			a.sum = true
		case f.name + "_count":
			a.count, a.counted = s.value, true
		}
	}
	for k, a := range series {
		if len(a.les) == 0 || !math.IsInf(a.les[len(a.les)-1], 1) || !a.sum || !a.counted {
			t.Fatalf("%s{%s}: needs buckets ending in +Inf, _sum and _count", f.name, k)
		}
		for i := 1; i < len(a.les); i++ {
			if a.les[i] <= a.les[i-1] || a.counts[i] < a.counts[i-1] {
				t.Fatalf("%s{%s}: buckets not ascending and cumulative: le %v counts %v", f.name, k, a.les, a.counts)
			}
		}
		if a.counts[len(a.counts)-1] != a.count {
			t.Fatalf("%s{%s}: +Inf bucket %v != _count %v", f.name, k, a.counts[len(a.counts)-1], a.count)
		}
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// value returns the sum of the samples of name whose labels include want.
func (f *promFamily) value(name string, want map[string]string) float64 {
	total := 0.0
	for _, s := range f.samples {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range want {
			if s.labels[k] != v {
				ok = false
			}
		}
		if ok {
			total += s.value
		}
	}
	return total
}

// scrape fetches /metrics and parses it.
func (ts *testServer) scrape(headers ...string) map[string]*promFamily {
	ts.t.Helper()
	r := ts.do("GET", "/metrics", nil, headers...)
	if r.status != 200 {
		ts.t.Fatalf("GET /metrics: %d %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		ts.t.Fatalf("Content-Type %q", ct)
	}
	return parseProm(ts.t.(*testing.T), string(r.body))
}

func TestMetricsScrapeAfterRequestExecAndRun(t *testing.T) {
	so := newScriptedOpenAI(t, stepwise(
		scriptReply{calls: []ToolCall{tc("c1", "shell", map[string]any{"command": "echo hi"})}},
		scriptReply{text: "all done"},
	))
	te := newE2E(t, so, "")
	before := te.scrape()
	for _, name := range []string{"agentd_http_requests_total", "agentd_http_request_duration_seconds", "agentd_exec_total",
		"agentd_exec_duration_seconds", "agentd_runs_total", "agentd_run_duration_seconds", "agentd_runs_active",
		"agentd_model_requests_total", "agentd_model_tokens_total", "agentd_model_cost_usd_total", "agentd_machines",
		"agentd_machine_create_duration_seconds", "agentd_approvals_pending", "agentd_trigger_firings_total",
		"agentd_event_clients", "agentd_build_info", "go_goroutines", "process_resident_memory_bytes", "process_open_fds"} {
		if before[name] == nil {
			t.Fatalf("family %s missing", name)
		}
	}
	if v := before["agentd_build_info"].value("agentd_build_info", map[string]string{"version": version}); v != 1 {
		t.Fatalf("build info %v", before["agentd_build_info"].samples)
	}
	if before["go_goroutines"].samples[0].value < 1 || before["process_open_fds"].samples[0].value < 1 {
		t.Fatal("process gauges are not read")
	}

	// A request, an exec, a run with a tool call.
	te.call("GET", "/v1/agents", nil, 200, nil)
	m := te.create(map[string]any{"name": "metrics-box"})
	if out := te.sh(m.ID, "echo ok"); out != "ok\n" {
		t.Fatalf("exec: %q", out)
	}
	te.exec(m.ID, map[string]any{"cmd": "exit 3"})
	te.createAgent(map[string]any{"name": "metrics-agent", "tools": []string{"computer"}})
	var res RunResult
	te.call("POST", "/v1/agents/metrics-agent/run", map[string]any{"input": "go"}, 200, &res)
	if res.StopReason != "complete" {
		t.Fatalf("run: %+v", res)
	}
	te.do("GET", "/v1/runs/"+res.RunID, nil) // a path with an id: the route label must stay the pattern

	after := te.scrape()
	hr := after["agentd_http_requests_total"]
	if v := hr.value("agentd_http_requests_total", map[string]string{"route": "GET /v1/agents", "method": "GET", "code": "200"}); v < 1 {
		t.Fatalf("GET /v1/agents not counted: %v", hr.samples)
	}
	if v := hr.value("agentd_http_requests_total", map[string]string{"route": "POST /v1/agents/{name}/run", "code": "200"}); v != 1 {
		t.Fatalf("run request counted %v", v)
	}
	if v := hr.value("agentd_http_requests_total", map[string]string{"route": "GET /v1/runs/{id}"}); v != 1 {
		t.Fatalf("GET /v1/runs/{id} counted %v", v)
	}
	for _, s := range hr.samples {
		if strings.Contains(s.labels["route"], "run_") || strings.Contains(s.labels["route"], "cmp_") {
			t.Fatalf("a raw path in the route label: %v", s.labels)
		}
	}
	if v := after["agentd_http_request_duration_seconds"].value("agentd_http_request_duration_seconds_count",
		map[string]string{"route": "GET /v1/agents", "method": "GET", "code": "200"}); v < 1 {
		t.Fatal("request duration not observed")
	}
	ex := after["agentd_exec_total"]
	// echo ok, exit 3, and the run's shell tool: exec results by provider (local, or docker where the
	// end-to-end tests put their machines under AGENT_TEST_DOCKER=1).
	if ok, nz := ex.value("agentd_exec_total", map[string]string{"provider": m.Provider, "result": "ok"}),
		ex.value("agentd_exec_total", map[string]string{"provider": m.Provider, "result": "nonzero"}); ok < 2 || nz != 1 {
		t.Fatalf("exec counts ok=%v nonzero=%v: %v", ok, nz, ex.samples)
	}
	if v := after["agentd_exec_duration_seconds"].value("agentd_exec_duration_seconds_count", map[string]string{"provider": m.Provider}); v < 3 {
		t.Fatalf("exec durations %v", v)
	}
	if v := after["agentd_runs_total"].value("agentd_runs_total", map[string]string{"status": "complete"}); v != 1 {
		t.Fatalf("runs_total %v", after["agentd_runs_total"].samples)
	}
	if v := after["agentd_run_duration_seconds"].value("agentd_run_duration_seconds_count", nil); v != 1 {
		t.Fatalf("run duration count %v", v)
	}
	mr := after["agentd_model_requests_total"]
	if v := mr.value("agentd_model_requests_total", map[string]string{"provider": "openai", "model": "gpt-4o-mini", "result": "ok"}); v != 2 {
		t.Fatalf("model requests %v", mr.samples)
	}
	if v := after["agentd_model_tokens_total"].value("agentd_model_tokens_total", map[string]string{"provider": "openai", "direction": "input"}); v != 100 {
		t.Fatalf("input tokens %v", after["agentd_model_tokens_total"].samples)
	}
	if v := after["agentd_model_cost_usd_total"].value("agentd_model_cost_usd_total", map[string]string{"model": "gpt-4o-mini"}); v <= 0 {
		t.Fatalf("cost %v", after["agentd_model_cost_usd_total"].samples)
	}
	// Two machines: the one made here and the agent's.
	if v := after["agentd_machines"].value("agentd_machines", map[string]string{"provider": m.Provider, "state": "running"}); v != 2 {
		t.Fatalf("machines %v", after["agentd_machines"].samples)
	}
	if v := after["agentd_machine_create_duration_seconds"].value("agentd_machine_create_duration_seconds_count", map[string]string{"provider": m.Provider}); v != 2 {
		t.Fatalf("machine creates %v", v)
	}
	if v := after["agentd_runs_active"].samples[0].value; v != 0 {
		t.Fatalf("active runs %v", v)
	}
}

func TestMetricsLabelEscapingAndHistogram(t *testing.T) {
	m := newMetrics()
	m.httpDone("GET /v1/x/{name}", "BREW", 418, 3e9)
	m.httpDone("GET /v1/x/{name}", "GET", 0, 1e6)
	m.modelDone("weird/mo\"del\\with\nnewline", Usage{InputTokens: 5}, nil)
	var b strings.Builder
	w := bufio.NewWriter(&b)
	m.write(w, []gaugeFamily{{name: "x_gauge", help: "a help with \\ and\nnewline", samples: []gaugeSample{{labels: []string{"a", `q"`}, value: 2}}}})
	w.Flush()
	fams := parseProm(t, b.String())
	if v := fams["agentd_model_requests_total"].value("agentd_model_requests_total", map[string]string{"model": "mo\"del\\with\nnewline"}); v != 1 {
		t.Fatalf("escaped label did not round-trip:\n%s", b.String())
	}
	if v := fams["agentd_http_requests_total"].value("agentd_http_requests_total", map[string]string{"method": "other", "code": "418"}); v != 1 {
		t.Fatalf("method not normalised:\n%s", b.String())
	}
	if v := fams["agentd_http_requests_total"].value("agentd_http_requests_total", map[string]string{"method": "GET", "code": "200"}); v != 1 {
		t.Fatalf("implicit 200 not counted:\n%s", b.String())
	}
	h := fams["agentd_http_request_duration_seconds"]
	if v := h.value("agentd_http_request_duration_seconds_bucket", map[string]string{"method": "other", "le": "2.5"}); v != 0 {
		t.Fatalf("3 s landed in le=2.5")
	}
	if v := h.value("agentd_http_request_duration_seconds_bucket", map[string]string{"method": "other", "le": "5"}); v != 1 {
		t.Fatalf("3 s not in le=5")
	}
	if v := h.value("agentd_http_request_duration_seconds_bucket", map[string]string{"method": "GET", "le": "0.005"}); v != 1 {
		t.Fatalf("1 ms not in le=0.005")
	}
}

func TestMetricsAuth(t *testing.T) {
	const token = "metrics-token-0123456789"
	ts := newTestServer(t, func(c *testSetup) { c.Token = token })
	if r := ts.do("GET", "/metrics", nil); r.status != 401 || r.errCode(t) != codeNoCredentials {
		t.Fatalf("no token: %d %s", r.status, r.body)
	}
	if r := ts.do("GET", "/metrics", nil, "Authorization", "Bearer wrong"); r.status != 401 {
		t.Fatalf("wrong token: %d", r.status)
	}
	fams := ts.scrape("Authorization", "Bearer "+token)
	// The refused scrapes were counted under route "none" (refused before the mux).
	if v := fams["agentd_http_requests_total"].value("agentd_http_requests_total", map[string]string{"route": "none", "code": "401"}); v != 2 {
		t.Fatalf("refused requests: %v", fams["agentd_http_requests_total"].samples)
	}

	pub := newTestServer(t, func(c *testSetup) { c.Token = token; c.MetricsPublic = true })
	pub.scrape()
	if r := pub.do("GET", "/v1/agents", nil); r.status != 401 { // only /metrics is public
		t.Fatalf("metricsPublic opened /v1: %d", r.status)
	}
	if r := pub.do("POST", "/metrics", nil); r.status != 401 && r.status != 404 {
		t.Fatalf("POST /metrics: %d", r.status)
	}
}

func TestMetricsConfigKey(t *testing.T) {
	cfg := defaultConfig()
	if err := parseConfigFile([]byte("metricsPublic: true\n"), &cfg); err != nil || !cfg.MetricsPublic {
		t.Fatalf("metricsPublic: %v %v", err, cfg.MetricsPublic)
	}
}

// BenchmarkMetricsScrape: GET /metrics over HTTP with 1,000 runs recorded (a fake model, one step each)
// and the HTTP, run and model families filled by them.
func BenchmarkMetricsScrape(b *testing.B) {
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		return textResp("ok"), nil
	}}
	te := newTestServer(b, withFakeModel(m))
	te.putAgent(testSpec("bench-metrics", nil))
	for range 1000 {
		te.call("POST", "/v1/agents/bench-metrics/run", map[string]any{"input": "x"}, 200, nil)
	}
	r := te.do("GET", "/metrics", nil)
	if !strings.Contains(string(r.body), `agentd_runs_total{status="complete"} 1000`) {
		b.Fatalf("1,000 runs not counted:\n%s", r.body)
	}
	b.SetBytes(int64(len(r.body)))
	client := &http.Client{}
	for b.Loop() {
		res, err := client.Get(te.url + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatal(res.Status)
		}
	}
}
