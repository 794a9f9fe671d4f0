// triggers.go — http, webhook and cron triggers: the dispatch tables rebuilt on every agent change, the
// two wildcard mounts, signed webhooks with replay protection, and the trigger listing.
//
// Entry points: newTriggerService (owned by the server; Close stops the cron scheduler and waits for
// webhook bookkeeping), triggerService.sync (at start and after every agent create, update and delete),
// handleHTTPTrigger (/v1/t/<agent><path>, any method), handleWebhookTrigger (POST /v1/w/<agent><path>),
// handleListTriggers (GET /v1/triggers). Cron itself is in triggers_cron.go.
//
// Rules (docs/API.md Triggers, DESIGN §7/§7a): only http, webhook and cron are mounted; paths match exactly
// (the http default `/` answers at /v1/t/a and /v1/t/a/); an unknown mount is 404 E_AGENT_NOT_FOUND. The
// prompt is taken from ?input/?text/?q, else a non-JSON body, else the JSON keys input, text, message,
// prompt, content, query, else the JSON body itself; none is 422. A trigger's run is an ordinary run
// (same ceilings, approvals, recording, events) with RunSummary.trigger naming it. A webhook with a
// secret is verified on its raw body before anything is parsed (GitHub-style sha256=<hex> or Standard
// Webhooks), in constant time, and its prompt is its signed body only (?input, ?text, ?q refused); a
// delivery id seen in the last 15 minutes is answered from the first delivery and never runs the agent
// twice; under the GitHub scheme (no timestamp, delivery id unsigned) the body is the delivery: a body
// seen in the last 15 minutes is refused as a replay unless it carries the first one's delivery id (a
// retry). Secrets are never listed, logged or echoed.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// MountedTrigger is one row of GET /v1/triggers.
type MountedTrigger struct {
	Agent  string `json:"agent"`
	Type   string `json:"type"`
	At     string `json:"at"`     // the mount path
	Detail string `json:"detail"` // free text; never a secret
}

type triggerDeps struct {
	store *store
	hub   *hub
	log   *slog.Logger
	now   func() time.Time
	// fireCron starts the run of a cron job; the channel closes when that run ends.
	fireCron func(job cronJob, at time.Time) (<-chan struct{}, error)
	// off: config.yaml's triggers: false — nothing is mounted, no cron job runs, and the trigger
	// routes answer 404 E_ROUTE_NOT_FOUND saying so.
	off bool
}

// triggerService owns the dispatch tables, the cron scheduler and the webhook delivery book.
type triggerService struct {
	triggerDeps
	cron       *cronScheduler
	deliveries *deliveryBook

	mu      sync.RWMutex
	mounts  map[string]TriggerSpec // "http" | "webhook" + " " + agent + path → trigger
	listing []MountedTrigger
}

func newTriggerService(d triggerDeps) *triggerService {
	t := &triggerService{triggerDeps: d, deliveries: newDeliveryBook(d.now), mounts: map[string]TriggerSpec{}}
	t.cron = newCronScheduler(d.now, d.store, d.fireCron, func(job cronJob, at time.Time) {
		d.hub.publish("triggers", "cron_skipped", map[string]any{"jobId": job.ID, "agent": job.Agent,
			"at": timestamp(at), "reason": "the previous run of this trigger is still going"})
	}, d.log)
	return t
}

// Close stops the cron scheduler and waits for it and for webhook deliveries still being answered.
func (t *triggerService) Close() {
	t.cron.Close()
	close(t.deliveries.stop)
	t.deliveries.wg.Wait()
}

// mountPath is a trigger's path as mounted: always with a leading slash.
func mountPath(p string) string { return "/" + strings.TrimPrefix(p, "/") }

// sync rebuilds the dispatch tables and the cron jobs from the stored agents. After an agent change
// (cause names it, e.g. "agent_updated"), a triggers_synced event says what is mounted now.
func (t *triggerService) sync(ctx context.Context, cause, agent string) {
	ctx = context.WithoutCancel(ctx) // a client that leaves must not leave the tables stale
	rows, err := t.store.ListAgents(ctx)
	if err != nil {
		t.log.Error("syncing triggers: listing agents", "err", err)
		return
	}
	if t.off {
		rows = nil
	}
	mounts := map[string]TriggerSpec{}
	listing := []MountedTrigger{}
	var jobs []cronJob
	for _, row := range rows {
		var spec AgentSpec
		if err := json.Unmarshal([]byte(row.SpecJSON), &spec); err != nil {
			t.log.Error("syncing triggers: a stored spec does not decode", "agent", row.Name, "err", err)
			continue
		}
		for _, tr := range spec.Triggers {
			switch tr.Type {
			case "http":
				p := mountPath(tr.Path)
				mounts["http "+spec.Name+p] = tr
				listing = append(listing, MountedTrigger{Agent: spec.Name, Type: "http", At: "/v1/t/" + spec.Name + p,
					Detail: "any method; answers the run result, or its event stream with Accept: text/event-stream"})
			case "webhook":
				p := mountPath(tr.Path)
				mounts["webhook "+spec.Name+p] = tr
				detail := "POST; hmac-sha256 required (X-Hub-Signature-256, X-Agent-Signature or Standard Webhooks)"
				if tr.Secret == "" {
					detail = "POST; UNSIGNED: set secret on the trigger"
				}
				listing = append(listing, MountedTrigger{Agent: spec.Name, Type: "webhook", At: "/v1/w/" + spec.Name + p, Detail: detail})
			case "cron":
				jobs = append(jobs, cronJob{ID: cronJobID(spec.Name, tr.Schedule, tr.Prompt), Agent: spec.Name,
					Schedule: tr.Schedule, Prompt: tr.Prompt})
			}
		}
	}
	t.mu.Lock()
	t.mounts, t.listing = mounts, listing
	t.mu.Unlock()
	t.cron.setJobs(jobs)
	if cause != "" {
		t.hub.publish("triggers", "triggers_synced", map[string]any{"cause": cause, "agent": agent,
			"http": countType(listing, "http"), "webhook": countType(listing, "webhook"), "cron": len(jobs)})
	}
}

func countType(l []MountedTrigger, typ string) int {
	n := 0
	for _, m := range l {
		if m.Type == typ {
			n++
		}
	}
	return n
}

func (t *triggerService) lookup(typ, agent, path string) (TriggerSpec, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	tr, ok := t.mounts[typ+" "+agent+path]
	return tr, ok
}

func (s *server) handleListTriggers(w http.ResponseWriter, r *http.Request) error {
	s.triggers.mu.RLock()
	listing := s.triggers.listing
	s.triggers.mu.RUnlock()
	writeJSON(w, http.StatusOK, map[string]any{"triggers": listing, "cron": s.triggers.cron.entries()})
	return nil
}

// ---- running an agent for a trigger ----

// triggerAnswer is the body of a trigger's synchronous answer (DESIGN §7).
type triggerAnswer struct {
	RunID      string `json:"runId"`
	Text       string `json:"text"`
	StopReason string `json:"stopReason"`
	Usage      Usage  `json:"usage"`
}

func answerOf(res *RunResult) triggerAnswer {
	return triggerAnswer{RunID: res.RunID, Text: res.Text, StopReason: res.StopReason, Usage: res.Usage}
}

// prepareTriggerRun loads the agent and turns a prompt into run parameters, as POST .../run would.
func (s *server) prepareTriggerRun(ctx context.Context, agent, prompt, trigger string) (*AgentSpec, *runParams, error) {
	spec, err := s.loadAgent(ctx, agent)
	if err != nil {
		return nil, nil, err
	}
	in, _ := json.Marshal(prompt)
	p, err := prepareRun(spec, runBody{Input: in})
	if err != nil {
		return nil, nil, err
	}
	p.Trigger = trigger
	return spec, p, nil
}

// fireCron starts a cron job's run, detached from any client.
func (s *server) fireCron(job cronJob, at time.Time) (<-chan struct{}, error) {
	spec, p, err := s.prepareTriggerRun(context.Background(), job.Agent, job.Prompt, "cron:"+job.ID)
	if err != nil {
		return nil, err
	}
	ar, err := s.runs.start(spec, p, nil)
	if err != nil {
		return nil, err
	}
	s.hub.publish("triggers", "cron_fired", map[string]any{"jobId": job.ID, "agent": job.Agent, "runId": ar.id, "at": timestamp(at)})
	return ar.done, nil
}

// errTriggersOff answers the trigger routes of a server whose config.yaml has triggers: false.
func errTriggersOff() *apiError {
	return errorf(codeRouteNotFound, "triggers are off on this server (config.yaml: triggers: false)").
		withHint("remove triggers: false from config.yaml, " + takesEffect("triggers"))
}

func triggerNotFound(kind, at string) *apiError {
	return errorf(codeAgentNotFound, "no %s trigger is mounted at %s", kind, at).
		withHint("GET /v1/triggers lists the mounted triggers; paths match exactly")
}

func wantsStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream") || r.URL.Query().Get("stream") == "true"
}

// handleHTTPTrigger runs the agent exactly as POST /v1/agents/{name}/run does: the client waits for the
// result (or streams it), and its disconnect aborts the run.
func (s *server) handleHTTPTrigger(w http.ResponseWriter, r *http.Request) error {
	if s.triggers.off {
		return errTriggersOff()
	}
	agent, path := r.PathValue("agent"), mountPath(r.PathValue("path"))
	tr, ok := s.triggers.lookup("http", agent, path)
	if !ok {
		return triggerNotFound("http", "/v1/t/"+agent+path)
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	prompt, err := triggerPrompt(r, body)
	if err != nil {
		return err
	}
	spec, p, err := s.prepareTriggerRun(r.Context(), agent, prompt, "http:"+mountPath(tr.Path))
	if err != nil {
		return err
	}
	if wantsStream(r) {
		s.streamRun(w, r, spec, p)
		return nil
	}
	ar, err := s.runs.start(spec, p, nil)
	if err != nil {
		return err
	}
	s.waitRun(r, ar)
	writeJSON(w, http.StatusOK, answerOf(ar.result))
	return nil
}

// handleWebhookTrigger verifies, deduplicates and runs. A webhook's run belongs to the delivery, not to
// the connection: a sender that gives up waiting (GitHub waits 10 s) does not abort it, and its retry is
// answered with the same run.
func (s *server) handleWebhookTrigger(w http.ResponseWriter, r *http.Request) error {
	if s.triggers.off {
		return errTriggersOff()
	}
	agent, path := r.PathValue("agent"), mountPath(r.PathValue("path"))
	tr, ok := s.triggers.lookup("webhook", agent, path)
	if !ok {
		return triggerNotFound("webhook", "/v1/w/"+agent+path)
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	id := firstNonEmpty(r.Header.Get("webhook-id"), r.Header.Get("X-GitHub-Delivery"))
	key, byBody := id, false // what makes two requests one delivery
	if tr.Secret != "" {
		if err := verifyWebhook(tr.Secret, r.Header, body, s.triggers.now()); err != nil {
			return err
		}
		if err := signedPromptOnly(r); err != nil {
			return err
		}
		if hexSigned(r.Header) {
			// The GitHub scheme signs the body alone (no timestamp, and X-GitHub-Delivery is not
			// signed): the body is the delivery. A repeat within the window is a sender's retry only
			// when it carries the first one's delivery id; anything else is a replay, refused.
			sum := sha256.Sum256(body)
			key, byBody = "body:"+hex.EncodeToString(sum[:]), true
		}
	}
	var d *replayEntry[*delivery]
	if key != "" {
		var first bool
		if d, first = s.triggers.deliveries.begin(agent+path+"\x00"+key, &delivery{sender: id}); !first {
			if byBody && (id == "" || id != d.v.sender) {
				return errorf(codeExecDenied, "refused: this signed body was already delivered in the last 15 minutes (a replay)").
					withHint("the X-Hub-Signature-256 scheme has no timestamp, so a body is accepted once per 15 minutes; a retry carries the first delivery's X-GitHub-Delivery; put a unique id or time in each body, or sign with Standard Webhooks")
			}
			d.v.retries.Add(1)
			select {
			case <-d.done:
				w.Header().Set("X-Agent-Replayed", "true")
				writeJSON(w, d.v.status, d.v.answer)
			case <-r.Context().Done():
			}
			return nil
		}
	}
	prompt, err := triggerPrompt(r, body)
	if err == nil {
		var spec *AgentSpec
		var p *runParams
		if spec, p, err = s.prepareTriggerRun(r.Context(), agent, prompt, "webhook:"+mountPath(tr.Path)); err == nil {
			var ar *activeRun
			if ar, err = s.runs.start(spec, p, nil); err == nil {
				if d != nil {
					s.triggers.deliveries.completeWhenDone(d, ar)
				}
				select {
				case <-ar.done:
					writeJSON(w, http.StatusOK, answerOf(ar.result))
				case <-r.Context().Done():
				}
				return nil
			}
		}
	}
	if d != nil { // refused before a run started: a retry may try again
		s.triggers.deliveries.abandon(d)
	}
	return err
}

// ---- the prompt of a request ----

var promptKeys = []string{"input", "text", "message", "prompt", "content", "query"}

// triggerPrompt takes the prompt in DESIGN §7's order.
func triggerPrompt(r *http.Request, body []byte) (string, error) {
	q := r.URL.Query()
	for _, k := range []string{"input", "text", "q"} {
		if v := q.Get(k); strings.TrimSpace(v) != "" {
			return v, nil
		}
	}
	text := strings.TrimSpace(string(body))
	if text == "" {
		return "", errorf(codeSpecInvalid, "no prompt found in the request").
			withHint("send ?input=..., a text body, or a JSON body with one of: " + strings.Join(promptKeys, ", "))
	}
	if !utf8.Valid(body) {
		return "", errorf(codeSpecInvalid, "request body is not valid UTF-8").withHint("send the prompt as UTF-8 text or JSON")
	}
	var v any
	if !json.Valid(body) || json.Unmarshal(body, &v) != nil {
		return text, nil // a non-JSON body is the prompt as it is
	}
	switch x := v.(type) {
	case map[string]any:
		for _, k := range promptKeys {
			if s, ok := x[k].(string); ok && strings.TrimSpace(s) != "" {
				return s, nil
			}
		}
	case string:
		if strings.TrimSpace(x) != "" {
			return x, nil
		}
	}
	return text, nil // the JSON body itself
}

// signedPromptOnly refuses, on a signed webhook, the query parameters that would take the prompt's place:
// the signature covers the body, not the URL, so nothing else may change what the agent is asked.
func signedPromptOnly(r *http.Request) error {
	q := r.URL.Query()
	for _, k := range []string{"input", "text", "q"} {
		if q.Has(k) {
			return errorf(codeExecDenied, "refused: ?%s= on a signed webhook: the prompt of a signed webhook is its signed body, and the query string is not signed", k).
				withHint("put the prompt in the body you sign")
		}
	}
	return nil
}

// ---- webhook signatures ----

const webhookTolerance = 5 * time.Minute

func webhookDenied(format string, a ...any) *apiError {
	return errorf(codeExecDenied, format, a...).
		withHint("sign the raw body with the trigger's secret: X-Hub-Signature-256: sha256=<hex HMAC-SHA256>, or Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature: v1,<base64>)")
}

// verifyWebhook checks the raw body against the secret: GitHub-style `sha256=<hex>` in
// X-Hub-Signature-256 or X-Agent-Signature, or Standard Webhooks. Every comparison is constant-time.
func verifyWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	if hexSigned(h) {
		hexSigs := []string{h.Get("X-Hub-Signature-256"), h.Get("X-Agent-Signature")}
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		want := mac.Sum(nil)
		for _, sig := range hexSigs {
			if sig == "" {
				continue
			}
			hx, ok := strings.CutPrefix(strings.TrimSpace(sig), "sha256=")
			if !ok {
				return webhookDenied("webhook signature must have the form sha256=<hex>")
			}
			if got, err := hex.DecodeString(hx); err == nil && hmac.Equal(got, want) {
				return nil
			}
		}
		return webhookDenied("webhook signature does not match the body")
	}
	sigs := h.Get("webhook-signature")
	if sigs == "" {
		return webhookDenied("webhook signature missing: this trigger has a secret")
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	if id == "" || ts == "" {
		return webhookDenied("Standard Webhooks signature needs webhook-id and webhook-timestamp")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return webhookDenied("webhook-timestamp is not a Unix time in seconds")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > webhookTolerance || d < -webhookTolerance {
		return webhookDenied("webhook-timestamp is stale: outside the 5-minute tolerance")
	}
	key := []byte(secret)
	if b64, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(b64); err == nil {
			key = k
		}
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, part := range strings.Fields(sigs) {
		ver, b64, _ := strings.Cut(part, ",")
		if got, err := base64.StdEncoding.DecodeString(b64); ver == "v1" && err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return webhookDenied("webhook-signature does not match the body")
}

// hexSigned: the request is signed GitHub-style (sha256=<hex> of the body alone), which verifyWebhook
// then checks in place of Standard Webhooks.
func hexSigned(h http.Header) bool {
	return h.Get("X-Hub-Signature-256") != "" || h.Get("X-Agent-Signature") != ""
}

// ---- webhook deliveries ----

const (
	deliveryTTL = 15 * time.Minute
	maxDelivery = 10000 // delivery ids remembered at once; the oldest answered ones go first past it
)

// deliveryBook is the replay book (api_idempotency.go) of accepted webhook deliveries: for 15 minutes a
// sender's retry gets the first answer (the same run) instead of running the agent again.
type deliveryBook struct {
	*replayBook[*delivery]
	wg   sync.WaitGroup // goroutines waiting for a run's end to record its answer
	stop chan struct{}  // closed at shutdown: those goroutines stop waiting
}

type delivery struct {
	sender  string       // the delivery id the first request carried ("" for none)
	retries atomic.Int32 // retries answered (or waiting to be) from this delivery
	status  int
	answer  any
}

func newDeliveryBook(now func() time.Time) *deliveryBook {
	return &deliveryBook{replayBook: newReplayBook[*delivery](now, deliveryTTL, maxDelivery, 0), stop: make(chan struct{})}
}

// completeWhenDone records the run's answer for retries once the run ends, whether or not the first
// sender is still connected.
func (b *deliveryBook) completeWhenDone(d *replayEntry[*delivery], ar *activeRun) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		select {
		case <-ar.done:
			d.v.status, d.v.answer = http.StatusOK, answerOf(ar.result)
			b.finish(d, true, 0)
		case <-b.stop: // shutdown: the run service aborts the run; nothing is left to answer
		}
	}()
}

// abandon forgets a delivery that was refused before its run started; a retry that was waiting for it
// is told so, and a later one runs afresh.
func (b *deliveryBook) abandon(d *replayEntry[*delivery]) {
	d.v.status = http.StatusUnprocessableEntity
	d.v.answer = map[string]any{"error": errorf(codeSpecInvalid, "the first delivery with this id was refused").
		withHint("send the delivery again")}
	b.finish(d, false, 0)
}
