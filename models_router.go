// models_router.go — one chat request through the providers: names, aliases and strategies → candidates,
// the cost ceiling, retries with full-jitter backoff, fallbacks, error mapping and key scrubbing.
//
// Entry points: modelService.Stream / Chat (models.go), EstimateCost, plan + run (the stream handler
// plans first so a refusal is a plain JSON error).
// Rules (DESIGN §5, docs/API.md Errors): candidates are the requested model then the fallbacks; 3 attempts per
// candidate on 408/409/425/429/5xx/network with full-jitter backoff ≤ 8 s (Retry-After honoured up to the
// cap); 400/422 never retried and end the walk; 401/403 → E_NO_CREDENTIALS, next candidate; 404 →
// E_MODEL_UNAVAILABLE, next candidate; 429 on every candidate → E_QUOTA; every switch is a `warning`
// with code `fallback`; a stream switches only before it produced output, after that it ends in `error`.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

const (
	attemptsPerCandidate = 3
	backoffBase          = 500 * time.Millisecond
	backoffCap           = 8 * time.Second
	maxAliasHops         = 8
	maxStrategyCands     = 3
	charsPerToken        = 3.6
	defaultOutputTokens  = 4096
)

// builtinAliases map a short name to candidate models, first configured one wins.
var builtinAliases = map[string][]string{
	"opus":   {"anthropic/claude-opus-4-5", "openrouter/anthropic/claude-opus-4.5"},
	"sonnet": {"anthropic/claude-sonnet-4-5", "openrouter/anthropic/claude-sonnet-4.5"},
	"haiku":  {"anthropic/claude-haiku-4-5", "openrouter/anthropic/claude-haiku-4.5"},
	"gpt":    {"openai/gpt-5", "openrouter/openai/gpt-5"},
	"gemini": {"google/gemini-2.5-pro", "openrouter/google/gemini-2.5-pro"},
	"flash":  {"google/gemini-2.5-flash", "openrouter/google/gemini-2.5-flash"},
	"llama":  {"groq/llama-3.3-70b-versatile", "cerebras/llama-3.3-70b", "together/meta-llama/Llama-3.3-70B-Instruct-Turbo", "openrouter/meta-llama/llama-3.3-70b-instruct:free", "ollama/llama3.2"},
	"qwen":   {"groq/qwen/qwen3-32b", "cerebras/qwen-3-32b", "together/Qwen/Qwen2.5-72B-Instruct-Turbo", "ollama/qwen3"},
}

// candidate is one model the router may call.
type candidate struct {
	prov *providerDef
	info ModelInfo
	key  string
	base string
	cost float64 // estimated before the call
	err  *apiError
}

// chatPlan is a resolved request: the candidates in order and the warnings gathered while planning.
type chatPlan struct {
	cands    []candidate
	warnings []StreamEvent // emitted before the first call
}

// refusal is the error of a plan none of whose candidates can be called (each failed its pre-flight
// check: missing key, capability), or nil. The stream handler answers it as plain JSON with its status,
// exactly as the non-streamed endpoint would, instead of opening a stream only to fail it.
func (p *chatPlan) refusal() error {
	var failures []*apiError
	for _, c := range p.cands {
		if c.err == nil {
			return nil
		}
		failures = append(failures, c.err)
	}
	if len(failures) == 0 {
		return nil
	}
	return summariseFailures(failures)
}

// Stream sends one request through the router, calling emit for every StreamEvent (emit may be nil),
// and returns the assembled answer. Events: start, text_delta, thinking_delta, tool_call, warning,
// usage, then done — or error. A failure before any output may switch candidate; after output the
// stream ends in an `error` event and the error is returned.
func (m *modelService) Stream(ctx context.Context, req ChatRequest, opts chatOptions, emit func(StreamEvent)) (*ChatResponse, error) {
	p, err := m.plan(ctx, req, opts)
	if err != nil {
		if emit != nil {
			emit(StreamEvent{Type: "error", Error: asAPIError(err)})
		}
		m.metrics.modelDone(req.Model, Usage{}, err)
		return nil, err
	}
	resp, err := m.run(ctx, p, req, emit)
	if resp != nil {
		m.metrics.modelDone(resp.Model, resp.Usage, err)
	} else {
		m.metrics.modelDone(req.Model, Usage{}, err)
	}
	return resp, err
}

// EstimateCost resolves req.Model and estimates the cost of the call before it is made: prompt tokens
// from text length (~3.6 chars a token) plus the planned output allowance, priced from the catalog.
func (m *modelService) EstimateCost(req ChatRequest) (model string, usd float64, err error) {
	p, err := m.plan(m.ctx, req, chatOptions{MaxCostUSD: -1})
	if err != nil {
		return "", 0, err
	}
	for _, c := range p.cands {
		if c.err == nil {
			return c.info.ID, c.cost, nil
		}
	}
	return "", 0, p.cands[0].err
}

// plan resolves the requested model and the fallbacks into candidates, prices each and applies the
// ceiling. Nothing goes upstream here except availability probes for the strategies.
func (m *modelService) plan(ctx context.Context, req ChatRequest, opts chatOptions) (*chatPlan, error) {
	names := append([]string{req.Model}, opts.Fallbacks...)
	p := &chatPlan{}
	seen := map[string]bool{}
	var firstErr error
	for i, n := range names {
		ids, err := m.resolve(ctx, n)
		if err != nil {
			if i == 0 || firstErr == nil {
				firstErr = err
			}
			if ae := asAPIError(err); ae.Code == codeConfig {
				return nil, err
			}
			what := "fallback"
			if i == 0 {
				what = "model"
			}
			p.warnings = append(p.warnings, StreamEvent{Type: "warning", Code: "fallback",
				Message: fmt.Sprintf("%s %q skipped: %s", what, n, asAPIError(err).Message)})
			continue
		}
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			p.cands = append(p.cands, m.candidateFor(id, req))
		}
	}
	if len(p.cands) == 0 {
		return nil, firstErr
	}
	if opts.MaxCostUSD >= 0 {
		kept := p.cands[:0:0]
		var cheapest *candidate
		for i := range p.cands {
			c := p.cands[i]
			if c.cost <= opts.MaxCostUSD {
				kept = append(kept, c)
				continue
			}
			if cheapest == nil || c.cost < cheapest.cost {
				cheapest = &p.cands[i]
			}
			// Skipping a candidate is a switch: DESIGN §5 makes every switch a `fallback` warning.
			p.warnings = append(p.warnings, StreamEvent{Type: "warning", Code: "fallback",
				Message: fmt.Sprintf("%s skipped: estimated cost $%.4f exceeds the ceiling $%.4f", c.info.ID, c.cost, opts.MaxCostUSD),
				Detail:  map[string]any{"model": c.info.ID, "reason": "budget", "estimatedUsd": c.cost, "maxCostUsd": opts.MaxCostUSD}})
		}
		if len(kept) == 0 {
			return nil, errorf(codeBudgetExceeded, "estimated cost $%.4f of %s exceeds the ceiling $%.4f", cheapest.cost, cheapest.info.ID, opts.MaxCostUSD).
				withHint("raise maxCostUsd, lower maxTokens, shorten the prompt, or pick a cheaper model (free, local)").
				withDetail("estimatedUsd", cheapest.cost).withDetail("maxCostUsd", opts.MaxCostUSD).withDetail("model", cheapest.info.ID)
		}
		p.cands = kept
	}
	return p, nil
}

// candidateFor builds a candidate for a full model id, pricing the request and noting a missing key.
func (m *modelService) candidateFor(id string, req ChatRequest) candidate {
	pid, name, _ := strings.Cut(id, "/")
	prov := providerByID(pid)
	c := candidate{prov: prov, info: infoFor(prov, name, prov.ownServer(m.getenv))}
	_, known := lookupModel(id)
	if prov.Local { // what /api/show told the last probe: context window and capabilities
		m.mu.Lock()
		if mi, ok := m.probes[prov.ID].Infos[name]; ok {
			c.info, known = mi, true
		}
		m.mu.Unlock()
	}
	c.key, c.base = prov.key(m.getenv), prov.baseURL(m.getenv)
	if prov.missingKey(m.getenv) {
		c.err = errorf(codeNoCredentials, "%s needs an API key for %s", prov.DisplayName, id).
			withHint("set " + strings.Join(prov.EnvKeys, " or ") + " in the server's environment")
	}
	c.cost = estimateCost(c.info, req)
	if c.err == nil {
		if known {
			switch {
			case hasImages(req) && !c.info.SupportsVision:
				c.err = errorf(codeProviderUnavailable, "%s cannot take images", id).withHint("pick a vision model (GET /v1/models: supportsVision)")
			case len(req.Tools) > 0 && !c.info.SupportsTools:
				c.err = errorf(codeProviderUnavailable, "%s cannot call tools", id).withHint("pick a model with supportsTools")
			}
		}
	}
	return c
}

func argsOf(calls []ToolCall) string {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString(c.Name)
		b.WriteString(argsJSON(c.Args))
	}
	return b.String()
}

func hasImages(req ChatRequest) bool {
	for _, m := range req.Messages {
		for _, p := range m.Content {
			if p.Type == "image" {
				return true
			}
		}
	}
	return false
}

// estimateCost: prompt tokens from text length plus the planned output allowance, at catalog prices.
func estimateCost(mi ModelInfo, req ChatRequest) float64 {
	out := req.MaxTokens
	if out <= 0 {
		out = min(defaultOutputTokens, max(mi.MaxOutputTokens, 1))
	}
	return costOf(mi, Usage{InputTokens: estimateTokens(req), OutputTokens: out})
}

func estimateTokens(req ChatRequest) int {
	chars := len(req.System)
	for _, msg := range req.Messages {
		for _, p := range msg.Content {
			chars += len(p.Text) + len(p.Content) + len(p.Name)
			if p.Args != nil {
				b, _ := json.Marshal(p.Args)
				chars += len(b)
			}
			if p.Type == "image" {
				chars += 5400 // a typical image costs ~1.5k tokens
			}
		}
		chars += 14 // role framing, ~4 tokens
	}
	for _, t := range req.Tools {
		b, _ := json.Marshal(t)
		chars += len(b)
	}
	return int(float64(chars)/charsPerToken) + 1
}

// resolve turns a requested name into full model ids: a strategy, a provider/model id, an alias (the
// config's modelAliases first, chains ≤ 8 hops) or a bare catalog name.
func (m *modelService) resolve(ctx context.Context, name string) ([]string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		name = "auto"
	}
	for hop := 0; ; hop++ {
		if hop > maxAliasHops {
			return nil, errorf(codeConfig, "model alias %q resolves through more than %d aliases", name, maxAliasHops).
				withHint("shorten the modelAliases chain in config.yaml, " + takesEffect("modelAliases"))
		}
		switch name {
		case "auto", "free", "local":
			return m.autoCandidates(m.statuses(ctx), name)
		}
		if pid, rest, ok := strings.Cut(name, "/"); ok && providerByID(pid) != nil && rest != "" {
			return []string{name}, nil
		}
		if target, ok := m.aliasMap()[name]; ok {
			if _, err := m.resolveAlias(name); err != nil {
				return nil, err
			}
			name = strings.TrimSpace(target)
			continue
		}
		if targets, ok := builtinAliases[name]; ok {
			return m.pickAlias(ctx, name, targets)
		}
		for _, mi := range catalog {
			if mi.Name == name {
				return []string{mi.ID}, nil
			}
		}
		return nil, errorf(codeModelUnavailable, "unknown model %q", name).
			withHint("use provider/model (e.g. anthropic/claude-sonnet-4-5), an alias (opus, sonnet, haiku, gpt, gemini, flash, llama, qwen), auto, free or local; GET /v1/models lists them")
	}
}

// resolveAlias follows the config's alias chain from name and fails with E_CONFIG on a loop.
func (m *modelService) resolveAlias(name string) (string, error) {
	seen := []string{name}
	cur := name
	for {
		next, ok := m.aliasMap()[cur]
		if !ok {
			return cur, nil
		}
		next = strings.TrimSpace(next)
		if slices.Contains(seen, next) {
			return "", errorf(codeConfig, "model alias loop: %s", strings.Join(append(seen, next), " → ")).
				withHint("fix modelAliases in config.yaml so every alias ends at a model, " + takesEffect("modelAliases"))
		}
		seen = append(seen, next)
		if len(seen) > maxAliasHops+1 {
			return "", errorf(codeConfig, "model alias %q resolves through more than %d aliases", name, maxAliasHops).
				withHint("shorten the modelAliases chain in config.yaml, " + takesEffect("modelAliases"))
		}
		cur = next
	}
}

// pickAlias chooses the first target of a built-in alias whose provider is configured (key set, or a
// local provider that answered its probe).
func (m *modelService) pickAlias(ctx context.Context, alias string, targets []string) ([]string, error) {
	var needLocal bool
	for _, t := range targets {
		pid, _, _ := strings.Cut(t, "/")
		p := providerByID(pid)
		if p.keyed() && !p.selfHosted(m.getenv) {
			if p.key(m.getenv) != "" {
				return []string{t}, nil
			}
		} else {
			needLocal = true
		}
	}
	if needLocal {
		st := m.statuses(ctx)
		for _, t := range targets {
			pid, name, _ := strings.Cut(t, "/")
			p := providerByID(pid)
			if (!p.keyed() || p.selfHosted(m.getenv)) && st[pid].Available {
				for _, live := range st[pid].Models {
					if live == name || strings.HasPrefix(live, name+":") {
						return []string{pid + "/" + live}, nil
					}
				}
			}
		}
	}
	var keys []string
	for _, t := range targets {
		pid, _, _ := strings.Cut(t, "/")
		if k := providerByID(pid).envKey(); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return nil, errorf(codeModelUnavailable, "no reachable model matches alias %q (tried %s)", alias, strings.Join(targets, ", ")).
		withHint("set one of " + strings.Join(keys, ", ") + ", or name a model as provider/model")
}

// autoCandidates orders reachable models for a strategy: auto = best quality then price, one per
// provider; free = free models first, then by price; local = ollama and lmstudio only.
func (m *modelService) autoCandidates(st map[string]providerStatus, strategy string) ([]string, error) {
	var pool []ModelInfo
	for i := range providerTable {
		p := &providerTable[i]
		ps := st[p.ID]
		own := p.ownServer(m.getenv)
		if !ps.Available || (strategy == "local" && !own) {
			continue
		}
		if own {
			for _, n := range ps.Models {
				pool = append(pool, infoFor(p, n, own))
			}
			continue
		}
		for _, mi := range catalog {
			if mi.Provider == p.ID && (len(ps.Models) == 0 || liveHas(ps.Models, mi.Name)) {
				pool = append(pool, mi)
			}
		}
		for _, n := range ps.Models { // what the provider lists and the catalog does not know
			if _, known := lookupModel(p.ID + "/" + n); !known && chatModel(n) {
				pool = append(pool, infoFor(p, n, own))
			}
		}
	}
	if len(pool) == 0 {
		if strategy == "local" {
			return nil, errorf(codeModelUnavailable, "no local model provider is reachable").
				withHint("start ollama (OLLAMA_HOST) or LM Studio (LMSTUDIO_HOST) and pull a model")
		}
		return nil, errorf(codeModelUnavailable, "no model provider is reachable").
			withHint("set a provider key such as ANTHROPIC_API_KEY or OPENAI_API_KEY, or start ollama")
	}
	price := func(mi ModelInfo) float64 { return costOf(mi, Usage{InputTokens: 1_000_000, OutputTokens: 250_000}) }
	prio := func(mi ModelInfo) int { return providerByID(mi.Provider).Priority }
	sort.SliceStable(pool, func(i, j int) bool {
		a, b := pool[i], pool[j]
		if strategy == "free" && a.Free != b.Free {
			return a.Free
		}
		if strategy == "free" && !a.Free && price(a) != price(b) {
			return price(a) < price(b)
		}
		if a.quality != b.quality {
			return a.quality > b.quality
		}
		if price(a) != price(b) {
			return price(a) < price(b)
		}
		return prio(a) > prio(b)
	})
	var out []string
	perProvider := map[string]bool{}
	for _, mi := range pool {
		if perProvider[mi.Provider] {
			continue
		}
		perProvider[mi.Provider] = true
		out = append(out, mi.ID)
		if len(out) == maxStrategyCands {
			break
		}
	}
	return out, nil
}

// run walks the candidates: retries, fallbacks, the stream's output rule, cost and the final events.
func (m *modelService) run(ctx context.Context, p *chatPlan, req ChatRequest, emit func(StreamEvent)) (*ChatResponse, error) {
	send := func(ev StreamEvent) {
		if emit != nil {
			emit(ev)
		}
	}
	fail := func(err error) (*ChatResponse, error) {
		ae := asAPIError(err)
		ae.Message = m.scrub(ae.Message)
		send(StreamEvent{Type: "error", Error: ae})
		return nil, ae
	}
	var warnings []string
	for _, w := range p.warnings {
		warnings = append(warnings, w.Message)
		send(w)
	}
	start := time.Now()
	var failures []*apiError
	var lastID string
	for ci, c := range p.cands {
		if ci > 0 {
			prev := failures[len(failures)-1]
			msg := fmt.Sprintf("%s failed (%s: %s); falling back to %s", lastID, prev.Code, prev.Message, c.info.ID)
			warnings = append(warnings, msg)
			send(StreamEvent{Type: "warning", Code: "fallback", Message: msg,
				Detail: map[string]any{"from": lastID, "to": c.info.ID, "code": prev.Code}})
		}
		lastID = c.info.ID
		if c.err != nil {
			failures = append(failures, c.err)
			continue
		}
		started, produced := false, false
		wrapped := func(ev StreamEvent) {
			produced = true
			if !started {
				started = true
				send(StreamEvent{Type: "start", Model: c.info.ID})
			}
			send(ev)
		}
		var lastErr *apiError
		endWalk := false
		for attempt := 1; attempt <= attemptsPerCandidate; attempt++ {
			resp, err := m.call(ctx, c, req, emit != nil, wrapped)
			if err == nil {
				if !started {
					send(StreamEvent{Type: "start", Model: c.info.ID})
				}
				resp.Model = c.info.ID
				if resp.Usage.InputTokens == 0 && resp.Usage.OutputTokens == 0 {
					// Some servers (LM Studio, proxies) report no usage: estimate it so costs and
					// ceilings still hold, and say so.
					resp.Usage.InputTokens = estimateTokens(req)
					resp.Usage.OutputTokens = int(float64(len(resp.Text)+len(resp.Thinking)+len(argsOf(resp.ToolCalls)))/charsPerToken) + 1
					msg := c.info.ID + " reported no token usage; usage and cost are estimated"
					resp.Warnings = append(resp.Warnings, msg)
					send(StreamEvent{Type: "warning", Code: "estimated_usage", Message: msg})
				}
				resp.Usage.CostUSD = costOf(c.info, resp.Usage)
				if c.info.Pricing == nil && !c.info.Free {
					msg := c.info.ID + " has no price in agentd's catalog: its cost is counted as $0, so maxCostUsd does not limit it"
					resp.Warnings = append(resp.Warnings, msg)
					send(StreamEvent{Type: "warning", Code: "unpriced", Message: msg})
				}
				resp.LatencyMS = time.Since(start).Milliseconds()
				if resp.ToolCalls == nil {
					resp.ToolCalls = []ToolCall{}
				}
				resp.Warnings = append(warnings, resp.Warnings...)
				resp.Message = resp.assistantMessage()
				u := resp.Usage
				send(StreamEvent{Type: "usage", Usage: &u})
				send(StreamEvent{Type: "done", Response: resp})
				return resp, nil
			}
			if ctx.Err() != nil {
				return fail(errorf(codeAborted, "model call to %s cancelled", c.info.ID))
			}
			ae, retry, next := m.classify(c, err)
			lastErr = ae
			m.log.Warn("model call failed", "model", c.info.ID, "attempt", attempt, "code", ae.Code, "message", ae.Message)
			if produced {
				return fail(ae.withDetail("afterOutput", true))
			}
			if !retry {
				endWalk = !next
				break
			}
			if attempt < attemptsPerCandidate {
				if serr := m.sleep(ctx, m.backoff(attempt, err)); serr != nil {
					return fail(errorf(codeAborted, "model call to %s cancelled", c.info.ID))
				}
			}
		}
		failures = append(failures, lastErr)
		if endWalk {
			return fail(lastErr)
		}
	}
	return fail(summariseFailures(failures))
}

// summarise picks the error of an exhausted walk: the single failure as is; 429 everywhere → E_QUOTA;
// one shared code → that code; otherwise E_MODEL_ERROR listing each candidate's failure.
func summariseFailures(failures []*apiError) *apiError {
	if len(failures) == 1 {
		return failures[0]
	}
	same := true
	for _, f := range failures[1:] {
		same = same && f.Code == failures[0].Code
	}
	msgs := make([]string, len(failures))
	for i, f := range failures {
		msgs[i] = f.Code + ": " + f.Message
	}
	if same {
		e := *failures[0]
		e.Message = "every candidate failed: " + strings.Join(msgs, "; ")
		return &e
	}
	return errorf(codeModelError, "every candidate failed: %s", strings.Join(msgs, "; ")).
		withHint("check the providers with GET /v1/doctor")
}

// classify maps an adapter error to the contract: the apiError, whether to retry, and whether the walk
// may continue with the next candidate.
func (m *modelService) classify(c candidate, err error) (ae *apiError, retry, next bool) {
	ue, ok := err.(*upstreamError)
	if !ok {
		a := asAPIError(err)
		a.Message = m.scrub(a.Message)
		return a, false, true
	}
	msg := m.scrub(ue.msg)
	st := ue.status
	with := func(a *apiError) *apiError {
		if st != 0 {
			a = a.withDetail("status", st)
		}
		return a.withDetail("model", c.info.ID)
	}
	switch {
	case st == 0:
		return with(errorf(codeModelError, "%s", msg).withHint("the provider's answer was cut off or unreadable; retried")), true, true
	case st == 400 || st == 422:
		return with(errorf(codeModelError, "%s rejected the request (%d): %s", c.prov.DisplayName, st, msg).
			withHint("the request is invalid for this model; fix it rather than retrying")), false, false
	case st == 401 || st == 403:
		return with(errorf(codeNoCredentials, "%s rejected the API key (%d): %s", c.prov.DisplayName, st, msg).
			withHint("check " + c.prov.envKey() + " in the server's environment")), false, true
	case st == 404:
		return with(errorf(codeModelUnavailable, "%s does not serve %s: %s", c.prov.DisplayName, c.info.Name, msg).
			withHint("GET /v1/models lists the models each provider serves")), false, true
	case st == 429:
		return with(errorf(codeQuota, "%s is rate limiting (429): %s", c.prov.DisplayName, msg).
			withHint("wait, or configure fallbackModels on another provider")), true, true
	case st == 408 || st == 409 || st == 425 || st >= 500:
		return with(errorf(codeModelError, "%s failed (%d): %s", c.prov.DisplayName, st, msg).
			withHint("the provider had a problem; retried with backoff")), true, true
	}
	return with(errorf(codeModelError, "%s answered %d: %s", c.prov.DisplayName, st, msg).
		withHint("the provider refused the request")), false, true
}

// backoff is full jitter over an exponential window capped at 8 s; a Retry-After wins when given.
func (m *modelService) backoff(attempt int, err error) time.Duration {
	if ue, ok := err.(*upstreamError); ok && ue.retryAfter > 0 {
		return min(ue.retryAfter, backoffCap)
	}
	window := min(backoffBase<<(attempt-1), backoffCap)
	return m.jitter(window)
}

func (m *modelService) call(ctx context.Context, c candidate, req ChatRequest, stream bool, emit func(StreamEvent)) (*ChatResponse, error) {
	switch c.prov.Wire {
	case "openai":
		return m.openaiChat(ctx, c, req, stream, emit)
	case "anthropic":
		return m.anthropicChat(ctx, c, req, stream, emit)
	case "gemini":
		return m.geminiChat(ctx, c, req, stream, emit)
	case "ollama":
		return m.ollamaChat(ctx, c, req, stream, emit)
	}
	return nil, errorf(codeNotImplemented, "wire format %q is not implemented", c.prov.Wire)
}

// scrub removes every configured provider key and anything shaped like a credential (keys echoed by a
// proxy, or pasted into a prompt and reflected in an error), with the same redactor runs use. Error paths
// only, so building it per call is fine and sees the environment as it is now.
func (m *modelService) scrub(s string) string {
	return newRedactor(m.getenv).redact(s)
}
