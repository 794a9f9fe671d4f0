// models_probes.go — provider availability: one probe per provider (list its models), four at a time, each
// bounded by a timeout, results cached briefly and shared by concurrent callers.
//
// Entry points: modelService.statuses (GET /v1/models, the doctor, the auto/free/local strategies).
// Rules (docs/API.md Models 1, DESIGN §5): a dead provider never stalls a listing — a caller waits at most
// one probe timeout per round of four; a keyed provider is available when its key is set and it lists
// models; keyless ones (ollama, lmstudio) when they answer; a flip of availability publishes
// `provider_changed` on the `providers` topic. Probe rounds belong to the service (Close waits).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

const (
	probeParallel = 4
	probeSlack    = 250 * time.Millisecond // beyond one probe timeout, for the round's own bookkeeping
	probeStaleMax = 5 * time.Minute        // older results are not served while a refresh runs
)

// providerStatus is one provider's last probe result.
type providerStatus struct {
	Available bool
	Answered  bool     // the provider answered its model listing (models below are live)
	Models    []string // live model names, catalog ones first
	Infos     map[string]ModelInfo
	Reason    string
	Hint      string
}

// statuses returns the cached probe results (fresh for probeTTL; after that served stale, up to
// probeStaleMax, while a background round refreshes them). Concurrent callers share one round. A caller
// with nothing usable cached waits at most one probe timeout (plus a little slack): with more than four slow
// providers the round outlives that, and the caller gets what is known — finished probes, the previous
// result of the others, or "probe still running" — while the round completes into the cache.
func (m *modelService) statuses(ctx context.Context) map[string]providerStatus {
	m.mu.Lock()
	age := m.now().Sub(m.probedAt)
	if !m.probedAt.IsZero() && age < m.probeTTL {
		st := m.probes
		m.mu.Unlock()
		return st
	}
	ch := m.inflight
	if ch == nil {
		ch = make(chan struct{})
		m.inflight = ch
		m.partial = map[string]providerStatus{}
		m.wg.Add(1)
		go m.probeAll(ch)
	}
	if !m.probedAt.IsZero() && age < probeStaleMax {
		st := m.probes // stale while the refresh runs: a listing never waits once something is known
		m.mu.Unlock()
		return st
	}
	m.mu.Unlock()
	wait := time.NewTimer(m.probeTimeout + probeSlack)
	defer wait.Stop()
	select {
	case <-ch:
	case <-ctx.Done():
	case <-m.ctx.Done():
	case <-wait.C:
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inflight == nil || m.inflight != ch {
		return m.probes
	}
	merged := make(map[string]providerStatus, len(providerTable))
	for _, p := range providerTable {
		switch ps, ok := m.partial[p.ID]; {
		case ok:
			merged[p.ID] = ps
		case m.probes[p.ID].Reason != "" || m.probes[p.ID].Available:
			merged[p.ID] = m.probes[p.ID]
		default:
			merged[p.ID] = providerStatus{Reason: p.DisplayName + " probe still running", Hint: "ask again in a moment"}
		}
	}
	return merged
}

// probeAll runs one round: every provider, four at a time, each under probeTimeout.
func (m *modelService) probeAll(done chan struct{}) {
	defer m.wg.Done()
	results := make(map[string]providerStatus, len(providerTable))
	record := func(id string, ps providerStatus) {
		m.mu.Lock()
		results[id] = ps
		m.partial[id] = ps
		m.mu.Unlock()
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, probeParallel)
	for i := range providerTable {
		p := &providerTable[i]
		if p.missingKey(m.getenv) {
			record(p.ID, providerStatus{Reason: strings.Join(p.EnvKeys, " or ") + " is not set",
				Hint: "export " + p.EnvKeys[0] + "=<key> before starting agentd"})
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-m.ctx.Done():
		}
		if m.ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(m.ctx, m.probeTimeout)
			defer cancel()
			record(p.ID, m.probe(ctx, p))
		}()
	}
	wg.Wait()

	// The flips are published under m.mu and before done closes: a caller that waited for this round
	// sees its events, and two rounds' events reach the hub in the order the rounds were stored.
	m.mu.Lock()
	prev, had := m.probes, !m.probedAt.IsZero()
	m.probes, m.probedAt, m.inflight, m.partial = results, m.now(), nil, nil
	if had && m.hub != nil {
		for _, p := range providerTable {
			if prev[p.ID].Available != results[p.ID].Available {
				r := results[p.ID]
				m.hub.publish("providers", "provider_changed", map[string]any{
					"kind": "model", "name": p.ID, "available": r.Available, "reason": r.Reason})
			}
		}
	}
	m.mu.Unlock()
	close(done)
}

func (m *modelService) probe(ctx context.Context, p *providerDef) providerStatus {
	names, infos, err := m.listModels(ctx, p)
	if err != nil {
		ps := providerStatus{Reason: m.scrub(err.Error())}
		switch ue, _ := err.(*upstreamError); {
		case ue != nil && (ue.status == 401 || ue.status == 403):
			ps.Reason = p.DisplayName + " rejected the API key"
			ps.Hint = "check " + p.envKey()
		case ctx.Err() != nil:
			ps.Reason = fmt.Sprintf("%s did not answer within %s", p.DisplayName, m.probeTimeout)
			ps.Hint = hintFor(p)
		default:
			ps.Hint = hintFor(p)
		}
		return ps
	}
	ps := providerStatus{Available: true, Answered: true, Models: orderNames(p.ID, names), Infos: infos}
	if p.Local && len(names) == 0 {
		ps.Available = false
		ps.Reason = p.DisplayName + " answered but has no models"
		ps.Hint = "pull or load a model first (ollama pull llama3.2)"
	}
	return ps
}

func hintFor(p *providerDef) string {
	switch p.ID {
	case "ollama":
		return "start ollama (ollama serve) or set OLLAMA_HOST"
	case "lmstudio":
		return "start the LM Studio server or set LMSTUDIO_HOST"
	}
	return "check the network and " + p.BaseEnv
}

// listModels asks a provider for its model ids in its own wire format.
func (m *modelService) listModels(ctx context.Context, p *providerDef) ([]string, map[string]ModelInfo, error) {
	c := candidate{prov: p, key: p.key(m.getenv), base: p.baseURL(m.getenv)}
	switch p.Wire {
	case "anthropic":
		return m.anthropicModels(ctx, c)
	case "gemini":
		return m.geminiModels(ctx, c)
	case "ollama":
		return m.ollamaModels(ctx, c)
	}
	return m.openaiModels(ctx, c)
}

// chatModel filters ids that are not chat models out of a provider's list (embeddings, audio, images).
func chatModel(id string) bool {
	id = strings.ToLower(id)
	return !slices.ContainsFunc([]string{"embed", "whisper", "tts", "dall-e", "moderation", "transcribe", "audio", "image",
		"realtime", "search", "rerank", "guard"}, func(bad string) bool { return strings.Contains(id, bad) })
}

// orderNames puts catalog models first (catalog order), then the rest sorted.
func orderNames(provider string, names []string) []string {
	out := make([]string, 0, len(names))
	seen := map[string]bool{}
	for _, n := range catalogNames(provider) {
		if liveHas(names, n) {
			out = append(out, n)
			seen[n] = true
		}
	}
	var rest []string
	for _, n := range names {
		if !seen[n] && !seen[undated(n)] && chatModel(n) {
			rest = append(rest, n)
			seen[n] = true
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// getJSON performs a GET (a POST when body is not nil) and decodes a JSON answer, turning failures into
// upstreamErrors.
func (m *modelService) getJSON(ctx context.Context, c candidate, url string, body any, headers map[string]string, v any) error {
	method := http.MethodGet
	if body != nil {
		method = http.MethodPost
	}
	resp, err := m.send(ctx, c, method, url, body, headers)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return netError(ctx, c.prov.DisplayName, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &upstreamError{msg: c.prov.DisplayName + ": unreadable model list: " + err.Error()}
	}
	return nil
}
