// metrics.go — GET /metrics in the Prometheus text exposition format 0.0.4, stdlib only.
//
// Entry points: newMetrics (owned by the server, handed to the services through their deps), the
// counting hooks (httpDone from ServeHTTP with the mux pattern noted by api(), execDone, machineCreated,
// runStarted/runFinished, modelDone), and (*server).handleMetrics, which adds the gauges the services
// already know (active runs, pending approvals, live machines, event-socket clients) at scrape time.
// Rules: every family has HELP and TYPE, counters end in _total, histograms have cumulative buckets with
// +Inf, _sum and _count; label values are escaped; the route label is the mux pattern, never a raw path
// (a request refused before the mux is route="none"); the method label is one of the HTTP methods or
// "other". The hot path is one mutex and one map lookup keyed by a fixed-size label tuple (no
// allocation once a series exists). A nil *metrics counts nothing (services built without one).
// /metrics needs the token when one is set, unless config.yaml says metricsPublic: true.
package main

import (
	"bufio"
	"context"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxLabels is the most labels a family of this file has; a series is keyed by a fixed-size tuple.
const maxLabels = 4

type labelKey [maxLabels]string

// family is one metric family: a counter, a gauge or a histogram, with its series.
type family struct {
	name, help, typ string
	labels          []string
	buckets         []float64 // histograms: upper bounds, ascending, +Inf implied

	mu     sync.Mutex
	series map[labelKey]*series
}

type series struct {
	value  float64  // counter, gauge
	counts []uint64 // histogram: per bucket (not cumulative; summed when written), then +Inf
	sum    float64
	count  uint64
}

func (f *family) get(vals []string) *series {
	var k labelKey
	copy(k[:], vals)
	s := f.series[k]
	if s == nil {
		s = &series{}
		if f.typ == "histogram" {
			s.counts = make([]uint64, len(f.buckets)+1)
		}
		f.series[k] = s
	}
	return s
}

// add adds v to a counter (or sets nothing for v < 0: counters only go up).
func (f *family) add(v float64, vals ...string) {
	if f == nil || v < 0 {
		return
	}
	f.mu.Lock()
	f.get(vals).value += v
	f.mu.Unlock()
}

// observe records one value of a histogram.
func (f *family) observe(v float64, vals ...string) {
	if f == nil {
		return
	}
	i, _ := slices.BinarySearch(f.buckets, v) // first bound ≥ v; len(buckets) is +Inf
	f.mu.Lock()
	s := f.get(vals)
	s.counts[i]++
	s.sum += v
	s.count++
	f.mu.Unlock()
}

// metrics is the server's registry: the families it counts as things happen.
type metrics struct {
	families []*family

	httpRequests, httpDuration *family
	execTotal, execDuration    *family
	runsTotal, runDuration     *family
	modelRequests, modelTokens *family
	modelCost, machineCreate   *family
	triggerFirings             *family
}

var (
	secondsBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	longBuckets    = []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
)

func newMetrics() *metrics {
	m := &metrics{}
	def := func(name, typ, help string, buckets []float64, labels ...string) *family {
		f := &family{name: name, typ: typ, help: help, labels: labels, buckets: buckets, series: map[labelKey]*series{}}
		m.families = append(m.families, f)
		return f
	}
	m.httpRequests = def("agentd_http_requests_total", "counter", "HTTP requests answered, by route (the mux pattern), method and status code.", nil, "route", "method", "code")
	m.httpDuration = def("agentd_http_request_duration_seconds", "histogram", "Time to answer an HTTP request (a stream: until it ended), by route, method and status code.", secondsBuckets, "route", "method", "code")
	m.execTotal = def("agentd_exec_total", "counter", "Commands run in machines through the command policy (API, terminal-less exec, agent tools), by provider and result (ok, nonzero, timeout, error).", nil, "provider", "result")
	m.execDuration = def("agentd_exec_duration_seconds", "histogram", "Duration of commands run in machines, by provider.", secondsBuckets, "provider")
	m.runsTotal = def("agentd_runs_total", "counter", "Agent runs finished, by final status (complete, step_limit, budget, timeout, aborted, loop, error).", nil, "status")
	m.runDuration = def("agentd_run_duration_seconds", "histogram", "Duration of finished agent runs, by final status.", longBuckets, "status")
	m.modelRequests = def("agentd_model_requests_total", "counter", "Requests through the model router, by provider, model and result (ok or error).", nil, "provider", "model", "result")
	m.modelTokens = def("agentd_model_tokens_total", "counter", "Tokens used by model requests, by provider, model and direction (input or output).", nil, "provider", "model", "direction")
	m.modelCost = def("agentd_model_cost_usd_total", "counter", "Estimated cost in USD of model requests, by provider and model.", nil, "provider", "model")
	m.machineCreate = def("agentd_machine_create_duration_seconds", "histogram", "Time to create and provision a machine (cold path), by provider.", longBuckets, "provider")
	m.triggerFirings = def("agentd_trigger_firings_total", "counter", "Runs started by a trigger, by trigger type (http, webhook, cron).", nil, "type")
	return m
}

// httpMethods are the method label's values; anything else is "other" (a client must not mint series).
var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// httpDone counts one answered request.
func (m *metrics) httpDone(route, method string, status int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = "none"
	}
	if !slices.Contains(httpMethods, method) {
		method = "other"
	}
	if status == 0 {
		status = http.StatusOK
	}
	code := statusText(status)
	m.httpRequests.add(1, route, method, code)
	m.httpDuration.observe(d.Seconds(), route, method, code)
}

// statusText is strconv.Itoa without an allocation for the usual codes.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 201:
		return "201"
	case 204:
		return "204"
	case 404:
		return "404"
	}
	return strconv.Itoa(code)
}

// execDone counts one policy-checked command.
func (m *metrics) execDone(provider string, res *ExecResult, err error, d time.Duration) {
	if m == nil {
		return
	}
	result := "ok"
	switch {
	case err != nil:
		result = "error"
		if asAPIError(err).Code == codeExecTimeout {
			result = "timeout"
		}
	case res != nil && res.TimedOut:
		result = "timeout"
	case res != nil && res.ExitCode != 0:
		result = "nonzero"
	}
	m.execTotal.add(1, provider, result)
	m.execDuration.observe(d.Seconds(), provider)
}

func (m *metrics) machineCreated(provider string, d time.Duration) {
	if m != nil {
		m.machineCreate.observe(d.Seconds(), provider)
	}
}

// runStarted counts a trigger's firing: trigger is "<type>:<what>" ("" for a run no trigger started).
func (m *metrics) runStarted(trigger string) {
	if m == nil || trigger == "" {
		return
	}
	typ, _, _ := strings.Cut(trigger, ":")
	m.triggerFirings.add(1, typ)
}

func (m *metrics) runFinished(status string, d time.Duration) {
	if m == nil {
		return
	}
	m.runsTotal.add(1, status)
	m.runDuration.observe(d.Seconds(), status)
}

// modelDone counts one request through the router: model is the model that answered (provider/model),
// or the one asked for when none did.
func (m *metrics) modelDone(model string, u Usage, err error) {
	if m == nil {
		return
	}
	provider, name, ok := strings.Cut(model, "/")
	if !ok {
		provider, name = "unknown", model
	}
	if name == "" {
		name = "unknown"
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.modelRequests.add(1, provider, name, result)
	if u.InputTokens > 0 {
		m.modelTokens.add(float64(u.InputTokens), provider, name, "input")
	}
	if u.OutputTokens > 0 {
		m.modelTokens.add(float64(u.OutputTokens), provider, name, "output")
	}
	if u.CostUSD > 0 {
		m.modelCost.add(u.CostUSD, provider, name)
	}
}

// ---- exposition ----

// gauge is one sample of a family read at scrape time.
type gaugeSample struct {
	labels []string // name, value pairs
	value  float64
}

type gaugeFamily struct {
	name, help string
	samples    []gaugeSample
}

// write renders the registry, then the scrape-time gauges, in the text format.
func (m *metrics) write(w *bufio.Writer, gauges []gaugeFamily) {
	for _, f := range m.families {
		f.write(w)
	}
	for _, g := range gauges {
		writeHeader(w, g.name, g.help, "gauge")
		for _, s := range g.samples {
			w.WriteString(g.name)
			writeLabels(w, s.labels)
			w.WriteByte(' ')
			w.WriteString(formatValue(s.value))
			w.WriteByte('\n')
		}
	}
}

func writeHeader(w *bufio.Writer, name, help, typ string) {
	w.WriteString("# HELP " + name + " ")
	w.WriteString(escapeHelp(help))
	w.WriteString("\n# TYPE " + name + " " + typ + "\n")
}

func (f *family) write(w *bufio.Writer) {
	f.mu.Lock()
	keys := make([]labelKey, 0, len(f.series))
	for k := range f.series {
		keys = append(keys, k)
	}
	snap := make(map[labelKey]series, len(f.series))
	for k, s := range f.series {
		c := *s
		c.counts = slices.Clone(s.counts)
		snap[k] = c
	}
	f.mu.Unlock()
	slices.SortFunc(keys, func(a, b labelKey) int { return slices.Compare(a[:], b[:]) })

	writeHeader(w, f.name, f.help, f.typ)
	pairs := make([]string, 0, 2*len(f.labels)+2)
	for _, k := range keys {
		s := snap[k]
		pairs = pairs[:0]
		for i, l := range f.labels {
			pairs = append(pairs, l, k[i])
		}
		if f.typ != "histogram" {
			w.WriteString(f.name)
			writeLabels(w, pairs)
			w.WriteString(" " + formatValue(s.value) + "\n")
			continue
		}
		base := f.name
		var cum uint64
		for i := range len(f.buckets) + 1 {
			cum += s.counts[i]
			le := "+Inf"
			if i < len(f.buckets) {
				le = formatValue(f.buckets[i])
			}
			w.WriteString(base + "_bucket")
			writeLabels(w, append(pairs, "le", le))
			w.WriteString(" " + strconv.FormatUint(cum, 10) + "\n")
		}
		w.WriteString(base + "_sum")
		writeLabels(w, pairs)
		w.WriteString(" " + formatValue(s.sum) + "\n")
		w.WriteString(base + "_count")
		writeLabels(w, pairs)
		w.WriteString(" " + strconv.FormatUint(s.count, 10) + "\n")
	}
}

func writeLabels(w *bufio.Writer, pairs []string) {
	if len(pairs) == 0 {
		return
	}
	w.WriteByte('{')
	for i := 0; i+1 < len(pairs); i += 2 {
		if i > 0 {
			w.WriteByte(',')
		}
		w.WriteString(pairs[i])
		w.WriteString(`="`)
		w.WriteString(escapeLabel(pairs[i+1]))
		w.WriteByte('"')
	}
	w.WriteByte('}')
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// ---- the endpoint ----

// handleMetrics answers the scrape: the counted families, then the gauges read now.
func (s *server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	gauges, err := s.scrapeGauges(r.Context())
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	bw := bufio.NewWriterSize(w, 32<<10)
	s.metrics.write(bw, gauges)
	return bw.Flush()
}

// scrapeGauges reads what the services already know.
func (s *server) scrapeGauges(ctx context.Context) ([]gaugeFamily, error) {
	one := func(name, help string, v float64, labels ...string) gaugeFamily {
		return gaugeFamily{name: name, help: help, samples: []gaugeSample{{labels: labels, value: v}}}
	}
	machines := gaugeFamily{name: "agentd_machines", help: "Live machines (not destroyed, not in the warm pool), by provider and state."}
	recs, err := s.store.ListComputers(ctx)
	if err != nil {
		return nil, err
	}
	byKey := map[[2]string]int{}
	for _, m := range recs {
		byKey[[2]string{m.Provider, m.State}]++
	}
	keys := make([][2]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return slices.Compare(a[:], b[:]) })
	for _, k := range keys {
		machines.samples = append(machines.samples, gaugeSample{labels: []string{"provider", k[0], "state", k[1]}, value: float64(byKey[k])})
	}
	clients := s.hub.clientCount()
	out := []gaugeFamily{
		one("agentd_runs_active", "Agent runs in flight.", float64(s.runs.activeCount())),
		machines,
		one("agentd_approvals_pending", "Tool calls waiting for a human approval.", float64(len(s.runs.approvals.list()))),
		one("agentd_event_clients", "Clients connected to the events socket (GET /v1/events).", float64(clients)),
		one("agentd_build_info", "Always 1: the version of agentd and the Go release it was built with.", 1,
			"version", version, "goversion", runtime.Version()),
		one("go_goroutines", "Number of goroutines that currently exist.", float64(runtime.NumGoroutine())),
	}
	if rss, ok := residentMemory(); ok {
		out = append(out, one("process_resident_memory_bytes", "Resident memory size in bytes.", float64(rss)))
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		out = append(out, one("process_open_fds", "Number of open file descriptors.", float64(len(fds))))
	}
	return out, nil
}

// residentMemory reads the resident set size from /proc (Linux); false elsewhere.
func residentMemory() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * uint64(os.Getpagesize()), true
}

// clientCount is the number of events-socket subscribers.
func (h *hub) clientCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// activeCount is the number of runs in flight.
func (rs *runService) activeCount() int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.active)
}

// routeNote carries the matched mux pattern from api() back to ServeHTTP, which counts the request.
type routeNote struct{ pattern string }

type routeNoteKey struct{}

// noteRoute records the request's mux pattern for the metrics.
func noteRoute(r *http.Request) {
	if n, ok := r.Context().Value(routeNoteKey{}).(*routeNote); ok {
		n.pattern = r.Pattern
	}
}
