// cli_agents.go — the client commands for agents, runs, approvals, models, triggers, sessions, events
// and the doctor.
//
// Entry points: the (*cli) methods named in cliCommands (cli.go).
//
// Rules (DESIGN §8): `run` streams text and each tool call as they happen, asks on an approval when the
// terminal is interactive (--yes/--no for scripts), and exits 0 only when the run ends complete; Ctrl-C
// disconnects, which aborts the run on the server. `logs -f` follows a run and reconnects with
// Last-Event-ID after a network blip. `distill` prints only the spec's YAML on stdout, so
// `agentd distill X > a.yaml && agentd apply a.yaml` works. `doctor` works with no server.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/websocket"
	"gopkg.in/yaml.v3"
)

func (c *cli) agents(args []string) error {
	var out struct {
		Agents []AgentSummary `json:"agents"`
	}
	if done, err := c.listing(args, "/v1/agents", &out); done {
		return err
	}
	rows := [][]string{}
	now := time.Now()
	for _, a := range out.Agents {
		var trig []string
		for _, t := range a.Triggers {
			trig = append(trig, t.Type)
		}
		rows = append(rows, []string{a.Name, a.Model, strings.Join(a.Tools, ","), strings.Join(trig, ","),
			strconv.Itoa(a.RunCount), ago(a.UpdatedAt, now)})
	}
	c.table([]string{"NAME", "MODEL", "TOOLS", "TRIGGERS", "RUNS", "UPDATED"}, rows)
	return nil
}

// specFiles expands the arguments of apply: a directory gives its *.yaml, *.yml and *.json files.
func specFiles(args []string) ([]string, error) {
	var files []string
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			files = append(files, a)
			continue
		}
		for _, pat := range []string{"*.yaml", "*.yml", "*.json"} {
			m, _ := filepath.Glob(filepath.Join(a, pat))
			m = slices.DeleteFunc(m, isTestFile) // NAME.test.yaml is an agent's tests (cli_test_cmd.go), not a spec
			files = append(files, m...)
		}
	}
	slices.Sort(files)
	return files, nil
}

func (c *cli) apply(args []string) error {
	pos, err := c.flags(args, c.jsonFlag, 1, -1)
	if err != nil {
		return err
	}
	files, err := specFiles(pos)
	if err != nil {
		return err
	}
	failed := 0
	for _, file := range files {
		sum, verb, err := c.applyOne(file)
		if err != nil {
			failed++
			var ae *apiError
			if errors.As(err, &ae) && ae.Details["issues"] != nil {
				for _, line := range ae.Details["issues"].([]any) {
					fmt.Fprintf(c.stderr, "%s: %v\n", file, line)
				}
				continue
			}
			fmt.Fprintf(c.stderr, "%s: %v\n", file, err)
			continue
		}
		if c.asJSON {
			c.printJSON(sum)
		} else {
			fmt.Fprintf(c.stdout, "%s %s\n", verb, sum.Name)
		}
	}
	if failed > 0 {
		return exitCode{code: 1, msg: fmt.Sprintf("%d of %d files not applied", failed, len(files))}
	}
	return nil
}

// applyOne creates the agent of one file, or updates it when it exists.
func (c *cli) applyOne(file string) (AgentSummary, string, error) {
	var sum AgentSummary
	b, err := os.ReadFile(file)
	if err != nil {
		return sum, "", err
	}
	var body map[string]any
	var name string
	if strings.EqualFold(filepath.Ext(file), ".json") {
		var spec map[string]any
		if err := json.Unmarshal(b, &spec); err != nil {
			return sum, "", fmt.Errorf("not JSON: %v", err)
		}
		name, _ = spec["name"].(string)
		body = map[string]any{"spec": spec}
	} else {
		var head struct {
			Name string `yaml:"name"`
		}
		yaml.Unmarshal(b, &head)
		name, body = head.Name, map[string]any{"yaml": string(b)}
	}
	// What is legal but will not work (an unknown tool, a model no provider serves) is said before the
	// agent is stored; a server that cannot say (or an invalid spec, reported by the write) prints nothing.
	var checked struct{ Warnings []string }
	if c.call("POST", "/v1/agents/validate", body, &checked) == nil {
		for _, w := range checked.Warnings {
			fmt.Fprintf(c.stderr, "%s: warning: %s\n", file, w)
		}
	}
	if name != "" {
		if err := c.call("GET", "/v1/agents/"+url.PathEscape(name), nil, nil); err == nil {
			return sum, "updated", c.call("PUT", "/v1/agents/"+url.PathEscape(name), body, &sum)
		}
	}
	return sum, "created", c.call("POST", "/v1/agents", body, &sum)
}

func (c *cli) rmAgent(args []string) error {
	names, err := c.flags(args, func(fs *flag.FlagSet) {}, 1, -1)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := c.call("DELETE", "/v1/agents/"+url.PathEscape(n), nil, nil); err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, n)
	}
	return nil
}

// ---- runs ----

// readInput is the argument, or stdin when it is omitted.
func (c *cli) readInput(pos []string, at int) (string, error) {
	if len(pos) > at {
		return strings.Join(pos[at:], " "), nil
	}
	b, err := io.ReadAll(c.stdin)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(string(b)) == "" {
		return "", c.usage("no input: pass it as an argument or on stdin")
	}
	return string(b), nil
}

func (c *cli) runAgent(args []string) error {
	var detach, yes, no bool
	var model, approve string
	var maxSteps int
	var maxCost float64
	vars := kvFlag{}
	pos, err := c.flags(args, func(fs *flag.FlagSet) {
		fs.BoolVar(&detach, "detach", false, "")
		fs.BoolVar(&yes, "yes", false, "")
		fs.BoolVar(&no, "no", false, "")
		c.jsonFlag(fs)
		fs.StringVar(&model, "model", "", "")
		fs.Var(vars, "var", "")
		fs.IntVar(&maxSteps, "max-steps", 0, "")
		fs.Float64Var(&maxCost, "max-cost", -1, "")
		fs.StringVar(&approve, "approve", "", "")
	}, 1, -1)
	if err != nil {
		return err
	}
	if yes && no {
		return c.usage("--yes and --no together")
	}
	body, err := c.runBody(model, approve, vars, maxSteps, maxCost)
	if err != nil {
		return err
	}
	input, err := c.readInput(pos, 1)
	if err != nil {
		return err
	}
	body["input"] = input
	agent := pos[0]
	if isSpecFile(agent) { // a spec file: run it on a server of this process's own (cli_runfile.go)
		if detach {
			return c.usage("--detach needs a server that outlives this command; `agentd apply` the file, then run it by name")
		}
		var stop func()
		if agent, stop, err = c.runInProcess(agent); err != nil {
			return err
		}
		defer stop()
	}
	name := url.PathEscape(agent)
	if detach {
		var out struct {
			RunID string `json:"runId"`
		}
		if err := c.call("POST", "/v1/agents/"+name+"/run?detach=true", body, &out); err != nil {
			return err
		}
		if c.asJSON {
			return c.printJSON(out)
		}
		fmt.Fprintln(c.stdout, out.RunID)
		return nil
	}
	answer := "" // approvals: "y", "n", or ask
	if yes {
		answer = "y"
	} else if no {
		answer = "n"
	}
	r := &runPrinter{c: c, answer: answer}
	done, err := c.stream("POST", "/v1/agents/"+name+"/run/stream", body, r.event)
	if r.asking != nil {
		select {
		case <-r.asking:
		default: // the stream ended with a question open (answered elsewhere, expired): stop asking
			fmt.Fprintln(c.stderr)
		}
	}
	if (err != nil || !done && r.result == nil) && c.ctx.Err() != nil {
		return c.ctx.Err()
	}
	if err != nil {
		return err
	}
	if !done && r.result == nil {
		return errors.New("the run's stream ended early")
	}
	return r.exit()
}

// runBody is a run's body from run's flags: the ceilings and approval mode may only tighten the spec's
// (the server clamps them and says so in a warning event).
func (c *cli) runBody(model, approve string, vars kvFlag, maxSteps int, maxCost float64) (map[string]any, error) {
	body := map[string]any{}
	if model != "" {
		body["model"] = model
	}
	if len(vars) > 0 {
		body["vars"] = vars
	}
	c.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "max-steps":
			body["maxSteps"] = maxSteps
		case "max-cost":
			body["maxCostUsd"] = maxCost
		}
	})
	switch {
	case maxCost < 0 && body["maxCostUsd"] != nil:
		return nil, c.usage("--max-cost must be 0 or more (US dollars)")
	case body["maxSteps"] != nil && maxSteps < 1:
		return nil, c.usage("--max-steps must be 1 or more")
	}
	switch approve {
	case "":
	case "auto", "ask", "readonly":
		body["approvalMode"] = approve
	default:
		return nil, c.usage("--approve takes auto, ask or readonly, not %q", approve)
	}
	return body, nil
}

// runPrinter renders run events for people (or as JSON lines) and answers approvals. In watch mode
// (`logs`) it only shows them: watching a run never answers its approvals, past or live.
type runPrinter struct {
	c      *cli
	watch  bool
	answer string
	result *RunResult
	asking chan struct{} // an approval question in flight (one at a time)
	typed  chan struct{} // closed once its line was typed
	midTxt bool          // text was printed without a final newline
	midOut bool          // a tool's streamed output was printed without a final newline
	// streamed: the tool calls whose output came as tool_delta (tool_end does not repeat it)
	streamed map[string]bool
}

func (r *runPrinter) event(ev cliEvent) error {
	var e struct {
		Type       string     `json:"type"`
		Text       string     `json:"text"`
		CallID     string     `json:"callId"` // tool_delta
		Stream     string     `json:"stream"` // tool_delta: stdout or stderr
		Call       *ToolCall  `json:"call"`
		Output     *string    `json:"output"`
		IsError    *bool      `json:"isError"`
		Message    any        `json:"message"` // a warning's text; a message event's ModelMessage
		ApprovalID string     `json:"approvalId"`
		Request    any        `json:"request"`
		Reason     string     `json:"reason"`
		Result     *RunResult `json:"result"`
		Error      *apiError  `json:"error"`
	}
	if err := json.Unmarshal(ev.data, &e); err != nil {
		return fmt.Errorf("unreadable event: %v", err)
	}
	if e.Type == "run_end" {
		r.result = e.Result
	}
	if e.Type == "approval_required" {
		if r.watch {
			req := plainJSON(e.Request)
			r.newline()
			fmt.Fprintf(r.c.stderr, "approval %s: %s (answer with `agentd approve %s` or `agentd deny %s`)\n",
				e.ApprovalID, req, e.ApprovalID, e.ApprovalID)
		} else {
			r.approve(e.ApprovalID, e.Request)
		}
	}
	out := r.c.stdout
	if r.c.asJSON {
		fmt.Fprintf(out, "%s\n", ev.data)
		return nil
	}
	switch e.Type {
	case "text_delta":
		fmt.Fprint(out, e.Text)
		r.midTxt = !strings.HasSuffix(e.Text, "\n")
	case "tool_start":
		r.newline()
		fmt.Fprintf(out, "%s %s\n", r.c.paint("36", "→ "+e.Call.Name), plainJSON(e.Call.Args))
	case "tool_delta": // a tool's output as it comes, indented under its call
		if r.streamed == nil {
			r.streamed = map[string]bool{}
		}
		r.streamed[e.CallID] = true
		var b strings.Builder
		for _, line := range strings.SplitAfter(e.Text, "\n") {
			if line == "" {
				continue
			}
			if !r.midOut {
				b.WriteString("  ")
			}
			b.WriteString(line)
			r.midOut = !strings.HasSuffix(line, "\n")
		}
		if e.Stream == "stderr" {
			fmt.Fprint(out, r.c.paint("31", b.String()))
		} else {
			fmt.Fprint(out, b.String())
		}
	case "tool_end":
		text := ""
		if e.Output != nil {
			text = strings.TrimRight(*e.Output, "\n")
		}
		if e.Call != nil && r.streamed[e.Call.ID] {
			// Shown as it came: only what the tool added after it (a last line like "[exit code 0]"), or
			// the last line of a failure.
			if r.midOut {
				fmt.Fprintln(out)
				r.midOut = false
			}
			last := text[strings.LastIndex(text, "\n")+1:]
			text = ""
			if strings.HasPrefix(last, "[") && strings.HasSuffix(last, "]") || e.IsError != nil && *e.IsError {
				text = last
			}
		}
		text = boundOutput(text, 4000) // the one head-and-tail rule: UTF-8 safe, one marker
		if e.IsError != nil && *e.IsError {
			text = r.c.paint("31", text)
		}
		if text != "" {
			fmt.Fprintln(out, indent(text, "  "))
		}
	case "tool_denied":
		r.newline()
		fmt.Fprintf(r.c.stderr, "denied: %s: %s\n", e.Call.Name, e.Reason)
	case "warning":
		r.newline()
		fmt.Fprintf(r.c.stderr, "warning: %v\n", e.Message)
	case "run_end":
		r.newline()
	}
	return nil
}

func (r *runPrinter) newline() {
	if r.midTxt {
		fmt.Fprintln(r.c.stdout)
		r.midTxt = false
	}
}

// approve answers an approval: by flag, by asking on the terminal, or by saying how to answer it.
// The question runs beside the stream, which must keep draining (a stalled stream aborts the run).
func (r *runPrinter) approve(id string, request any) {
	c := r.c
	if r.answer != "" {
		c.call("POST", "/v1/approvals/"+id, map[string]any{"approve": r.answer == "y"}, nil)
		return
	}
	f, ok := c.stdin.(*os.File)
	if !ok || !isTerminal(f) {
		fmt.Fprintf(c.stderr, "approval %s is waiting: answer with `agentd approve %s` or `agentd deny %s` (or run with --yes/--no)\n", id, id, id)
		return
	}
	if r.typed != nil {
		select {
		case <-r.typed: // answered on this terminal: let its answer arrive
			r.wait()
		default: // the open question's approval was settled elsewhere or expired: do not stall the stream
			fmt.Fprintf(c.stderr, "\napproval %s is waiting: answer with `agentd approve %s` or `agentd deny %s`\n", id, id, id)
			return
		}
	}
	asking, typed := make(chan struct{}), make(chan struct{})
	r.asking, r.typed = asking, typed
	go func() {
		defer close(asking)
		fmt.Fprintf(c.stderr, "\napproval needed: %s\napprove? [y/N] ", approvalText(request))
		var line string
		fmt.Fscanln(f, &line)
		close(typed)
		ok := strings.EqualFold(strings.TrimSpace(line), "y") || strings.EqualFold(strings.TrimSpace(line), "yes")
		if err := c.call("POST", "/v1/approvals/"+id, map[string]any{"approve": ok}, nil); err != nil {
			fmt.Fprintf(c.stderr, "answering the approval: %v\n", err)
		}
	}()
}

// approvalText is an approval's request for a person: the tool, then one line per argument (sorted by
// name; a string as itself, a multi-line one indented under its name, anything else as JSON). A request
// of another shape is shown as JSON.
func approvalText(request any) string {
	b, _ := json.Marshal(request)
	var req approvalRequest
	if json.Unmarshal(b, &req) != nil || req.Tool == "" {
		return plainJSON(request)
	}
	var out strings.Builder
	out.WriteString(req.Tool)
	if req.Agent != "" {
		fmt.Fprintf(&out, " (agent %s)", req.Agent)
	}
	for _, k := range sortedKeys(req.Args) {
		v, isText := req.Args[k].(string)
		if !isText {
			v = plainJSON(req.Args[k])
		}
		v = strings.TrimRight(v, "\n")
		if strings.Contains(v, "\n") {
			fmt.Fprintf(&out, "\n  %s:\n%s", k, indent(v, "    "))
		} else {
			fmt.Fprintf(&out, "\n  %s: %s", k, v)
		}
	}
	return out.String()
}

// wait lets a question in flight finish; Ctrl-C does not wait for a line that may never be typed.
func (r *runPrinter) wait() {
	if r.asking != nil {
		select {
		case <-r.asking:
		case <-r.c.ctx.Done():
		}
	}
}

// exit is the run's exit code: 0 only for complete.
func (r *runPrinter) exit() error {
	if r.result == nil {
		return errors.New("the run ended without a result")
	}
	if r.result.StopReason == "complete" {
		return nil
	}
	msg := "run " + r.result.RunID + " ended: " + r.result.StopReason
	if e := r.result.Error; e != nil {
		msg += ": " + e.Code + ": " + e.Message
		if e.Hint != "" {
			msg += " (hint: " + e.Hint + ")"
		}
	}
	return exitCode{code: 1, msg: msg}
}

// plainJSON is v as one line of JSON for people: <, > and & as themselves, not \u003c escapes.
func plainJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

func indent(s, pre string) string { return pre + strings.ReplaceAll(s, "\n", "\n"+pre) }

func (c *cli) runs(args []string) error {
	var agent, status string
	var limit int
	var quiet bool
	if _, err := c.flags(args, func(fs *flag.FlagSet) {
		fs.StringVar(&agent, "agent", "", "")
		fs.StringVar(&status, "status", "", "")
		fs.IntVar(&limit, "limit", 50, "")
		c.jsonFlag(fs)
		fs.BoolVar(&quiet, "q", false, "")
	}, 0, 0); err != nil {
		return err
	}
	statuses := []string{"running", "complete", "step_limit", "budget", "timeout", "aborted", "loop", "error"}
	if status != "" && !slices.Contains(statuses, status) {
		return c.usage("--status %q: one of %s", status, strings.Join(statuses, ", "))
	}
	// --status is not a query of GET /v1/runs: filter here, following nextCursor until limit rows match.
	type page struct {
		Runs       []json.RawMessage `json:"runs"`
		NextCursor string            `json:"nextCursor,omitempty"`
	}
	var out page
	var sums []RunSummary
	size, cursor := limit, ""
	if status != "" {
		limit, size = min(max(limit, 1), 500), 500
	}
	for {
		var p page
		if err := c.call("GET", "/v1/runs"+queryOf("agent", agent, "limit", strconv.Itoa(size), "cursor", cursor), nil, &p); err != nil {
			return err
		}
		for _, raw := range p.Runs {
			var sum RunSummary
			if err := json.Unmarshal(raw, &sum); err != nil {
				return fmt.Errorf("the server's run summary is not JSON: %v", err)
			}
			if status == "" || sum.Status == status {
				out.Runs, sums = append(out.Runs, raw), append(sums, sum)
			}
		}
		if status == "" {
			out.NextCursor = p.NextCursor
			break
		}
		if len(out.Runs) >= limit || p.NextCursor == "" {
			out.Runs, sums = out.Runs[:min(limit, len(out.Runs))], sums[:min(limit, len(sums))]
			break
		}
		cursor = p.NextCursor
	}
	if out.Runs == nil {
		out.Runs = []json.RawMessage{}
	}
	switch {
	case c.asJSON:
		return c.printJSON(out)
	case quiet:
		for _, r := range sums {
			fmt.Fprintln(c.stdout, r.RunID)
		}
		return nil
	}
	now := time.Now()
	rows := [][]string{}
	for _, r := range sums {
		dur := "-"
		if r.DurationMS != nil {
			dur = (time.Duration(*r.DurationMS) * time.Millisecond).Round(100 * time.Millisecond).String()
		}
		rows = append(rows, []string{r.RunID, r.Agent, r.Status, strconv.Itoa(r.Steps), dollars(r.CostUSD), dur,
			ago(r.StartedAt, now), firstNonEmpty(r.Trigger, "-")})
	}
	c.table([]string{"RUN", "AGENT", "STATUS", "STEPS", "COST", "DURATION", "STARTED", "TRIGGER"}, rows)
	return nil
}

func (c *cli) logs(args []string) error {
	var follow bool
	pos, err := c.flags(args, func(fs *flag.FlagSet) {
		fs.BoolVar(&follow, "f", false, "")
		c.jsonFlag(fs)
	}, 1, 1)
	if err != nil {
		return err
	}
	id := url.PathEscape(pos[0])
	r := &runPrinter{c: c, watch: true}
	if !follow {
		var out struct {
			Events []json.RawMessage `json:"events"`
		}
		if err := c.call("GET", "/v1/runs/"+id, nil, &out); err != nil {
			return err
		}
		for _, ev := range out.Events {
			r.event(cliEvent{data: ev})
		}
		return nil
	}
	last, backoff := "", 250*time.Millisecond
	for {
		h := http.Header{"Accept": {"text/event-stream"}}
		if last != "" {
			h.Set("Last-Event-ID", last)
		}
		resp, err := c.send(c.ctx, "GET", "/v1/runs/"+id+"/events", nil, h)
		if err == nil {
			var done bool
			done, err = readEvents(resp.Body, func(ev cliEvent) error {
				if ev.id != "" {
					last = ev.id
				}
				return r.event(ev)
			})
			resp.Body.Close()
			if done {
				return nil
			}
			backoff = 250 * time.Millisecond
		}
		if c.ctx.Err() != nil {
			return c.ctx.Err()
		}
		var ae *apiError
		if errors.As(err, &ae) && ae.Code != "" { // the server answered with a refusal: retrying will not help
			return err
		}
		// A network blip: reconnect and resume after the last event seen.
		select {
		case <-time.After(backoff):
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (c *cli) cancel(args []string) error {
	pos, err := c.flags(args, c.jsonFlag, 1, 1)
	if err != nil {
		return err
	}
	var out map[string]any
	if err := c.call("POST", "/v1/runs/"+url.PathEscape(pos[0])+"/cancel", nil, &out); err != nil {
		return err
	}
	if c.asJSON {
		return c.printJSON(out)
	}
	fmt.Fprintf(c.stdout, "%s %v\n", pos[0], out["status"])
	return nil
}

// ---- approvals, models, triggers ----

func (c *cli) approvals(args []string) error {
	var out struct {
		Approvals []PendingApproval `json:"approvals"`
	}
	if done, err := c.listing(args, "/v1/approvals", &out); done {
		return err
	}
	now, rows := time.Now(), [][]string{}
	for _, a := range out.Approvals {
		args := plainJSON(a.Call.Args)
		rows = append(rows, []string{a.ApprovalID, a.RunID, a.Agent, a.Call.Name, args, ago(a.ExpiresAt, now)})
	}
	c.table([]string{"APPROVAL", "RUN", "AGENT", "TOOL", "ARGS", "EXPIRES"}, rows)
	return nil
}

func (c *cli) answer(args []string, approve bool) error {
	var remember bool
	pos, err := c.flags(args, func(fs *flag.FlagSet) {
		if approve {
			fs.BoolVar(&remember, "remember", false, "")
		}
		c.jsonFlag(fs)
	}, 1, 1)
	if err != nil {
		return err
	}
	var out map[string]any
	if err := c.call("POST", "/v1/approvals/"+url.PathEscape(pos[0]), map[string]any{"approve": approve, "remember": remember}, &out); err != nil {
		return err
	}
	if c.asJSON {
		return c.printJSON(out)
	}
	word := "denied"
	if approve {
		word = "approved"
	}
	fmt.Fprintf(c.stdout, "%s %s\n", word, pos[0])
	return nil
}

func (c *cli) approve(args []string) error { return c.answer(args, true) }
func (c *cli) deny(args []string) error    { return c.answer(args, false) }

func (c *cli) models(args []string) error {
	var out struct {
		Models    []ModelInfo      `json:"models"`
		Providers []map[string]any `json:"providers"`
	}
	if done, err := c.listing(args, "/v1/models", &out); done {
		return err
	}
	rows := [][]string{}
	for _, p := range out.Providers {
		id, _ := p["id"].(string)
		reason, _ := p["reason"].(string)
		hint, _ := p["hint"].(string)
		rows = append(rows, []string{id, c.availability(p["available"] == true), strings.TrimSpace(reason + " " + hint)})
	}
	c.table([]string{"PROVIDER", "STATE", "REASON"}, rows)
	fmt.Fprintln(c.stdout)
	rows = [][]string{}
	for _, m := range out.Models {
		price := "free"
		if m.Pricing != nil && !m.Free {
			price = fmt.Sprintf("$%g / $%g per MTok", m.Pricing.InputPerMTok, m.Pricing.OutputPerMTok)
		}
		rows = append(rows, []string{m.ID, strconv.Itoa(m.ContextWindow), price})
	}
	c.table([]string{"MODEL", "CONTEXT", "PRICE (IN / OUT)"}, rows)
	return nil
}

func (c *cli) chat(args []string) error {
	var model string
	pos, err := c.flags(args, func(fs *flag.FlagSet) {
		fs.StringVar(&model, "m", "auto", "")
		c.jsonFlag(fs)
	}, 0, -1)
	if err != nil {
		return err
	}
	prompt, err := c.readInput(pos, 0)
	if err != nil {
		return err
	}
	body := map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": prompt}}}
	_, err = c.stream("POST", "/v1/models/chat/stream", body, func(ev cliEvent) error {
		if c.asJSON {
			fmt.Fprintf(c.stdout, "%s\n", ev.data)
			return nil
		}
		var e StreamEvent
		json.Unmarshal(ev.data, &e)
		switch e.Type {
		case "text_delta":
			fmt.Fprint(c.stdout, e.Text)
		case "warning":
			fmt.Fprintf(c.stderr, "warning: %s\n", e.Message)
		case "error":
			if e.Error != nil {
				return e.Error
			}
		case "done":
			fmt.Fprintln(c.stdout)
		}
		return nil
	})
	return err
}

func (c *cli) triggers(args []string) error {
	var out struct {
		Triggers []MountedTrigger `json:"triggers"`
		Cron     []cronEntry      `json:"cron"`
	}
	if done, err := c.listing(args, "/v1/triggers", &out); done {
		return err
	}
	rows := [][]string{}
	for _, t := range out.Triggers {
		rows = append(rows, []string{t.Agent, t.Type, t.At, t.Detail})
	}
	c.table([]string{"AGENT", "TYPE", "AT", "DETAIL"}, rows)
	if len(out.Cron) > 0 {
		fmt.Fprintln(c.stdout)
		now, rows := time.Now(), [][]string{}
		for _, e := range out.Cron {
			rows = append(rows, []string{e.JobID, e.Agent, e.Schedule, ago(e.NextAt, now), e.Prompt})
		}
		c.table([]string{"JOB", "AGENT", "SCHEDULE", "NEXT", "PROMPT"}, rows)
	}
	return nil
}

// ---- sessions ----

// importBody is the import request for a file or stdin: a path when the server runs on this machine (it
// reads the file itself, however large), else the content.
func (c *cli) importBody(arg, source string) (map[string]any, error) {
	body := map[string]any{}
	if source != "" {
		body["source"] = source
	}
	if arg == "-" {
		b, err := io.ReadAll(c.stdin)
		if err != nil {
			return nil, err
		}
		body["content"] = string(b)
		return body, nil
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, err
	}
	if u, err := url.Parse(c.base); err == nil && isLoopbackHost(u.Hostname()) {
		body["path"] = abs
		return body, nil
	}
	b, err := os.ReadFile(abs)
	if err != nil {
		return nil, err
	}
	body["content"] = string(b)
	return body, nil
}

func (c *cli) importSession(args []string) error {
	var source string
	pos, err := c.flags(args, func(fs *flag.FlagSet) {
		fs.StringVar(&source, "source", "", "")
		c.jsonFlag(fs)
	}, 1, 1)
	if err != nil {
		return err
	}
	body, err := c.importBody(pos[0], source)
	if err != nil {
		return err
	}
	var out struct {
		Transcript map[string]any `json:"transcript"`
	}
	if err := c.call("POST", "/v1/sessions/import", body, &out); err != nil {
		return err
	}
	if c.asJSON {
		return c.printJSON(out)
	}
	t := out.Transcript
	msgs, _ := t["messages"].([]any)
	fmt.Fprintf(c.stdout, "%v\t%v\t%d messages\t%v\n", t["id"], t["source"], len(msgs), t["title"])
	return nil
}

func (c *cli) distill(args []string) error {
	var model string
	pos, err := c.flags(args, func(fs *flag.FlagSet) {
		fs.StringVar(&model, "model", "", "")
		c.jsonFlag(fs)
	}, 1, 1)
	if err != nil {
		return err
	}
	id := pos[0]
	if _, statErr := os.Stat(id); statErr == nil || id == "-" {
		body, err := c.importBody(id, "")
		if err != nil {
			return err
		}
		var out struct {
			Transcript struct {
				ID string `json:"id"`
			} `json:"transcript"`
		}
		c.progress("importing %s…", id)
		if err := c.call("POST", "/v1/sessions/import", body, &out); err != nil {
			return err
		}
		id = out.Transcript.ID
	}
	body := map[string]any{"transcriptId": id}
	if model != "" {
		body["useModel"], body["model"] = true, model
	}
	var yamlText string
	var doneFrame map[string]any
	_, err = c.stream("POST", "/v1/sessions/distill/stream", body, func(ev cliEvent) error {
		var f struct {
			Type      string  `json:"type"`
			Stage     string  `json:"stage"`
			Pct       float64 `json:"pct"`
			YAML      string  `json:"yaml"`
			Distilled struct {
				Notes []string `json:"notes"`
			} `json:"distilled"`
		}
		json.Unmarshal(ev.data, &f)
		switch f.Type {
		case "progress":
			c.progress("distilling: %s (%d%%)", f.Stage, int(f.Pct*100))
		case "done":
			yamlText = f.YAML
			json.Unmarshal(ev.data, &doneFrame)
			delete(doneFrame, "type")
			for _, n := range f.Distilled.Notes {
				fmt.Fprintln(c.stderr, "note:", n)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if yamlText == "" {
		return errors.New("the distill stream ended without a spec")
	}
	if c.asJSON { // DESIGN §8: {distilled, spec, yaml}
		return c.printJSON(doneFrame)
	}
	fmt.Fprint(c.stdout, yamlText)
	return nil
}

// ---- events, doctor, completion ----

func (c *cli) events(args []string) error {
	topics, err := c.flags(args, func(fs *flag.FlagSet) {}, 0, -1)
	if err != nil {
		return err
	}
	conn, err := c.dialSocket("/v1/events")
	if err != nil {
		return err
	}
	defer conn.Close()
	go func() { <-c.ctx.Done(); conn.Close() }()
	if len(topics) > 0 {
		if err := websocket.JSON.Send(conn, map[string]any{"type": "subscribe", "topics": topics}); err != nil {
			return err
		}
	}
	for {
		var msg string
		if err := websocket.Message.Receive(conn, &msg); err != nil {
			if c.ctx.Err() != nil {
				return c.ctx.Err()
			}
			return fmt.Errorf("the event socket closed: %v", err)
		}
		fmt.Fprintln(c.stdout, strings.TrimSpace(msg))
	}
}

// dialSocket opens a WebSocket of the API with the bearer token.
func (c *cli) dialSocket(path string) (*websocket.Conn, error) {
	u, err := url.Parse(c.base + path)
	if err != nil {
		return nil, err
	}
	origin := *u
	origin.Path = ""
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	cfg, err := websocket.NewConfig(u.String(), origin.String())
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		cfg.Header.Set("Authorization", "Bearer "+c.token)
	}
	conn, err := cfg.DialContext(c.ctx)
	if err != nil {
		var de *websocket.DialError
		if errors.As(err, &de) && errors.Is(de.Err, websocket.ErrBadStatus) {
			// Ask again over plain HTTP to show the server's envelope (404, 401, …).
			if _, herr := c.send(c.ctx, "GET", path, nil, http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"},
				"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "Sec-Websocket-Version": {"13"}}); herr != nil {
				return nil, herr
			}
		}
		return nil, c.unreachable(err)
	}
	return conn, nil
}

func (c *cli) doctor(args []string) error {
	if _, err := c.flags(args, c.jsonFlag, 0, 0); err != nil {
		return err
	}
	var rep DoctorReport
	err := c.call("GET", "/v1/doctor", nil, &rep)
	var ae *apiError
	if errors.As(err, &ae) && ae.Code == "" { // no server: the same report, computed here
		cfg, cerr := loadConfig(nil, c.getenv, io.Discard)
		if cerr != nil {
			return cerr
		}
		s, serr := newServer(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
		if serr != nil {
			return serr
		}
		ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
		rep = s.doctor(ctx)
		cancel()
		s.Close(context.Background())
		err = nil
		fmt.Fprintf(c.stderr, "(no server at %s: computed here)\n", c.base)
	}
	if err != nil {
		return err
	}
	if c.asJSON {
		return c.printJSON(rep)
	}
	fmt.Fprintf(c.stdout, "agentd %s (%s, %s), data in %s\n", rep.Version, rep.Node, rep.Platform, rep.AgentHome)
	var offers, not []string // what this OS offers, configured or not (doctor.go's hostOffers)
	for _, o := range rep.Host.Offers {
		if o.Offered {
			offers = append(offers, o.Provider)
		} else {
			not = append(not, o.Provider+" ("+o.How+")")
		}
	}
	fmt.Fprintf(c.stdout, "this host (%s) offers %s", rep.Host.OS, strings.Join(offers, ", "))
	if len(not) > 0 {
		fmt.Fprintf(c.stdout, "; not %s", strings.Join(not, "; "))
	}
	fmt.Fprint(c.stdout, "\n\n")
	rows := [][]string{}
	for _, p := range rep.Providers {
		note := strings.TrimSpace(p.Reason + " " + p.Hint)
		if p.Available && p.ExecChannel != nil {
			note = "exec channel on"
			if !p.ExecChannel.Enabled {
				note = "exec channel off: " + p.ExecChannel.Reason
			}
		}
		rows = append(rows, []string{p.Name, c.availability(p.Available), p.IsolationKind, note})
	}
	c.table([]string{"COMPUTERS", "STATE", "ISOLATION", "NOTE"}, rows)
	fmt.Fprintln(c.stdout)
	rows = [][]string{}
	for _, m := range rep.Models {
		rows = append(rows, []string{m.ID, c.availability(m.Available), m.EnvKey, strings.TrimSpace(m.Reason + " " + m.Hint)})
	}
	c.table([]string{"MODELS", "STATE", "SET", "NOTE"}, rows)
	if len(rep.Images) > 0 {
		fmt.Fprintln(c.stdout)
		rows = [][]string{}
		for _, im := range rep.Images {
			rows = append(rows, []string{im.Flavor, im.Image, im.Provider, map[bool]string{true: "present", false: "missing: pull it, or set images in config.yaml and `kill -HUP` agentd"}[im.Present]})
		}
		c.table([]string{"FLAVOR", "IMAGE", "ENGINE", "STATE"}, rows)
	}
	for _, m := range rep.Browser.Missing { // the in-machine browser (computers_browser.go)
		fmt.Fprintln(c.stdout, "browser: "+m)
	}
	if len(rep.Pool.Flavors) > 0 { // the warm pool (computers_pool.go), when warmPool is configured
		fmt.Fprintln(c.stdout)
		rows = [][]string{}
		for _, f := range rep.Pool.Flavors {
			note := rep.Pool.Reason
			if rep.Pool.Enabled {
				note = rep.Pool.LastError
			}
			rows = append(rows, []string{f.Flavor, fmt.Sprintf("%d of %d", f.Ready, f.Target), f.Provider, note})
		}
		c.table([]string{"WARM POOL", "READY", "ENGINE", "NOTE"}, rows)
	}
	fmt.Fprintf(c.stdout, "\nselection: computers on %s (%s); model %s (%s)\n", rep.Selection.Provider,
		rep.Selection.ProviderReason, rep.Selection.Model, rep.Selection.ModelReason)
	for _, w := range rep.Warnings {
		fmt.Fprintln(c.stdout, c.paint("33", "warning: ")+w)
	}
	return nil
}

func (c *cli) completion(args []string) error {
	pos, err := c.flags(args, func(fs *flag.FlagSet) {}, 1, 1)
	if err != nil {
		return err
	}
	var names []string
	for _, cmd := range cliCommands() {
		names = append(names, cmd.name)
	}
	names = append(names, "serve", "validate", "version", "help")
	switch pos[0] {
	case "bash":
		fmt.Fprintf(c.stdout, bashCompletion, strings.Join(names, " "), strings.Join(names[:len(names)-1], " "))
	case "zsh":
		// bashcompinit needs compinit's compdef: load it first when the user's .zshrc has not.
		fmt.Fprintf(c.stdout, "(( $+functions[compdef] )) || { autoload -U +X compinit && compinit; }\n"+
			"autoload -U +X bashcompinit && bashcompinit\n"+bashCompletion, strings.Join(names, " "), strings.Join(names[:len(names)-1], " "))
	default:
		return c.usage("unknown shell %q: bash or zsh", pos[0])
	}
	return nil
}

// bashCompletion completes commands (and after help), then agent names, run ids, approval ids or
// computer ids from the running server.
const bashCompletion = `_agentd() {
  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]}
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "%s" -- "$cur")); return
  fi
  case "$cmd" in
    help) COMPREPLY=($(compgen -W "%s" -- "$cur")) ;;
    run|rm-agent) COMPREPLY=($(compgen -W "$(agentd __complete agents 2>/dev/null)" -- "$cur")) ;;
    logs|cancel) COMPREPLY=($(compgen -W "$(agentd __complete runs 2>/dev/null)" -- "$cur")) ;;
    approve|deny) COMPREPLY=($(compgen -W "$(agentd __complete approvals 2>/dev/null)" -- "$cur")) ;;
    exec|shell|rm|stop|start|port|cp) COMPREPLY=($(compgen -W "$(agentd __complete computers 2>/dev/null)" -- "$cur")) ;;
    apply|import|distill|validate) COMPREPLY=($(compgen -f -- "$cur")) ;;
  esac
}
complete -F _agentd agentd
`

// complete prints names for shell completion (the hidden `agentd __complete agents|runs|approvals|computers`).
func (c *cli) complete(args []string) error {
	lists := map[string]struct {
		path   string
		fields []string // printed when not empty
	}{
		"agents": {"/v1/agents", []string{"name"}}, "runs": {"/v1/runs?limit=100", []string{"runId"}},
		"approvals": {"/v1/approvals", []string{"approvalId"}}, "computers": {"/v1/computers", []string{"id", "name"}},
	}
	if len(args) != 1 {
		return nil
	}
	l, ok := lists[args[0]]
	var out map[string]json.RawMessage
	var rows []map[string]any
	if !ok || c.call("GET", l.path, nil, &out) != nil || json.Unmarshal(out[args[0]], &rows) != nil {
		return nil
	}
	for _, row := range rows {
		for _, f := range l.fields {
			if s, _ := row[f].(string); s != "" {
				fmt.Fprintln(c.stdout, s)
			}
		}
	}
	return nil
}
