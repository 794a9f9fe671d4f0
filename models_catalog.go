// models_catalog.go — the providers agentd speaks to and the built-in model catalog: context windows,
// capabilities and prices (USD per million tokens) for the main models of every provider.
//
// Entry points: providerTable (DESIGN §5, priority order), lookupModel, modelsOf, priceOf.
// Rules: provider keys and base URLs are read only through cfg.getenv; local models are free; a model
// missing from the catalog (a model a provider lists that agentd does not know, a self-hosted server's
// model) has no price: its cost counts as 0 and the run says so in a warning.
package main

import (
	"cmp"
	"net/url"
	"slices"
	"strings"
)

// providerDef is one model provider: how to find it, authenticate and talk to it.
type providerDef struct {
	ID          string
	DisplayName string
	Priority    int
	EnvKeys     []string // the first one set wins; empty for keyless (local) providers
	BaseEnv     string   // base URL override
	HostEnv     string   // keyless providers: the host setting (ollama, lmstudio)
	DefaultBase string
	Wire        string // openai | anthropic | gemini | ollama
	Local       bool
	Quirks      openaiQuirks // differences of OpenAI-compatible providers
}

// providerTable lists every provider, highest priority first (DESIGN §5).
var providerTable = []providerDef{
	{ID: "anthropic", DisplayName: "Anthropic", Priority: 95, EnvKeys: []string{"ANTHROPIC_API_KEY"},
		BaseEnv: "ANTHROPIC_BASE_URL", DefaultBase: "https://api.anthropic.com", Wire: "anthropic"},
	{ID: "openai", DisplayName: "OpenAI", Priority: 85, EnvKeys: []string{"OPENAI_API_KEY"},
		BaseEnv: "OPENAI_BASE_URL", DefaultBase: "https://api.openai.com/v1", Wire: "openai",
		Quirks: openaiQuirks{maxTokensField: "max_completion_tokens", streamUsage: true, reasoningEffort: true, jsonSchema: true}},
	{ID: "google", DisplayName: "Google Gemini", Priority: 80, EnvKeys: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"},
		BaseEnv: "GEMINI_BASE_URL", DefaultBase: "https://generativelanguage.googleapis.com/v1beta", Wire: "gemini"},
	{ID: "groq", DisplayName: "Groq", Priority: 60, EnvKeys: []string{"GROQ_API_KEY"},
		BaseEnv: "GROQ_BASE_URL", DefaultBase: "https://api.groq.com/openai/v1", Wire: "openai",
		Quirks: openaiQuirks{maxTokensField: "max_completion_tokens", streamUsage: true, usageInXGroq: true, jsonSchema: true, reasoningFormat: true}},
	{ID: "deepseek", DisplayName: "DeepSeek", Priority: 58, EnvKeys: []string{"DEEPSEEK_API_KEY"},
		BaseEnv: "DEEPSEEK_BASE_URL", DefaultBase: "https://api.deepseek.com", Wire: "openai",
		Quirks: openaiQuirks{maxTokensField: "max_tokens", streamUsage: true, reasoningContent: true, cacheHitTokens: true}},
	{ID: "cerebras", DisplayName: "Cerebras", Priority: 56, EnvKeys: []string{"CEREBRAS_API_KEY"},
		BaseEnv: "CEREBRAS_BASE_URL", DefaultBase: "https://api.cerebras.ai/v1", Wire: "openai",
		Quirks: openaiQuirks{maxTokensField: "max_completion_tokens", streamUsage: true, jsonSchema: true, toolChoiceAutoOnly: true}},
	{ID: "openrouter", DisplayName: "OpenRouter", Priority: 55, EnvKeys: []string{"OPENROUTER_API_KEY"},
		BaseEnv: "OPENROUTER_BASE_URL", DefaultBase: "https://openrouter.ai/api/v1", Wire: "openai",
		Quirks: openaiQuirks{maxTokensField: "max_tokens", usageAlways: true, reasoningContent: true, jsonSchema: true, appHeaders: true}},
	{ID: "mistral", DisplayName: "Mistral", Priority: 52, EnvKeys: []string{"MISTRAL_API_KEY"},
		BaseEnv: "MISTRAL_BASE_URL", DefaultBase: "https://api.mistral.ai/v1", Wire: "openai",
		Quirks: openaiQuirks{maxTokensField: "max_tokens", usageAlways: true, toolChoiceAny: true, jsonSchema: true, shortToolIDs: true}},
	{ID: "together", DisplayName: "Together AI", Priority: 50, EnvKeys: []string{"TOGETHER_API_KEY"},
		BaseEnv: "TOGETHER_BASE_URL", DefaultBase: "https://api.together.xyz/v1", Wire: "openai",
		Quirks: openaiQuirks{maxTokensField: "max_tokens", usageAlways: true, jsonSchema: true}},
	{ID: "lmstudio", DisplayName: "LM Studio", Priority: 42, HostEnv: "LMSTUDIO_HOST", BaseEnv: "LMSTUDIO_BASE_URL",
		DefaultBase: "http://127.0.0.1:1234/v1", Wire: "openai", Local: true,
		Quirks: openaiQuirks{maxTokensField: "max_tokens", jsonSchema: true, schemaOnlyJSON: true}},
	{ID: "ollama", DisplayName: "Ollama", Priority: 40, HostEnv: "OLLAMA_HOST", BaseEnv: "OLLAMA_BASE_URL",
		DefaultBase: "http://127.0.0.1:11434", Wire: "ollama", Local: true},
}

func providerByID(id string) *providerDef {
	for i := range providerTable {
		if providerTable[i].ID == id {
			return &providerTable[i]
		}
	}
	return nil
}

// envKey names the environment variable that configures the provider (doctor report).
func (p *providerDef) envKey() string {
	if len(p.EnvKeys) > 0 {
		return p.EnvKeys[0]
	}
	return p.HostEnv
}

// key returns the provider's API key from the environment ("" for keyless providers or when unset).
func (p *providerDef) key(getenv func(string) string) string {
	for _, k := range p.EnvKeys {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
	}
	return ""
}

func (p *providerDef) keyed() bool { return len(p.EnvKeys) > 0 }

// selfHosted: an OpenAI-compatible provider pointed at a server of the user's own (its base URL set)
// with no key — vLLM, llama.cpp, LocalAI and the like, which need none. It is called without an
// Authorization header and is available when it answers.
func (p *providerDef) selfHosted(getenv func(string) string) bool {
	return p.Wire == "openai" && p.keyed() && p.key(getenv) == "" && strings.TrimSpace(getenv(p.BaseEnv)) != ""
}

// missingKey: the provider needs a key and none is set.
func (p *providerDef) missingKey(getenv func(string) string) bool {
	return p.keyed() && p.key(getenv) == "" && !p.selfHosted(getenv)
}

// baseURL applies the overrides: <ID>_BASE_URL, then (local providers) the host setting, which may be a
// bare host:port as ollama documents it.
func (p *providerDef) baseURL(getenv func(string) string) string {
	if v := strings.TrimSpace(getenv(p.BaseEnv)); v != "" {
		return p.normalizeBase(v)
	}
	if p.HostEnv != "" {
		if v := strings.TrimSpace(getenv(p.HostEnv)); v != "" {
			if !strings.Contains(v, "://") {
				v = "http://" + v
			}
			v = strings.TrimRight(v, "/")
			if p.ID == "lmstudio" && !strings.HasSuffix(v, "/v1") {
				v += "/v1"
			}
			return v
		}
	}
	return p.DefaultBase
}

// normalizeBase accepts a base URL with or without the API's version path and a trailing slash:
// OPENAI_BASE_URL=http://gpu:8000 means http://gpu:8000/v1, ANTHROPIC_BASE_URL=https://x/v1 means https://x.
func (p *providerDef) normalizeBase(v string) string {
	v = strings.TrimRight(v, "/")
	u, err := url.Parse(v)
	if err != nil {
		return v
	}
	switch p.Wire {
	case "openai":
		if u.Path == "" {
			v += "/v1"
		}
	case "gemini":
		if u.Path == "" {
			v += "/v1beta"
		}
	case "anthropic":
		v = strings.TrimSuffix(v, "/v1")
	case "ollama":
		v = strings.TrimSuffix(v, "/api")
	}
	return v
}

// ModelInfo is one entry of GET /v1/models (DESIGN §5).
type ModelInfo struct {
	ID                string   `json:"id"`
	Provider          string   `json:"provider"`
	Name              string   `json:"name"`
	DisplayName       string   `json:"displayName"`
	ContextWindow     int      `json:"contextWindow"`
	MaxOutputTokens   int      `json:"maxOutputTokens"`
	SupportsTools     bool     `json:"supportsTools"`
	SupportsVision    bool     `json:"supportsVision"`
	SupportsStreaming bool     `json:"supportsStreaming"`
	Pricing           *pricing `json:"pricing,omitempty"`
	Free              bool     `json:"free"`

	quality   int  // router ordering for auto: higher is better
	reasoning bool // OpenAI reasoning model: no temperature/top_p, takes reasoning_effort
}

type pricing struct {
	InputPerMTok      float64 `json:"inputPerMTok"`
	OutputPerMTok     float64 `json:"outputPerMTok"`
	CacheReadPerMTok  float64 `json:"cacheReadPerMTok,omitempty"`
	CacheWritePerMTok float64 `json:"cacheWritePerMTok,omitempty"`
}

func cm(provider, name, display string, ctx, maxOut, quality int, tools, vision bool, in, out, cacheR, cacheW float64) ModelInfo {
	mi := ModelInfo{ID: provider + "/" + name, Provider: provider, Name: name, DisplayName: display,
		ContextWindow: ctx, MaxOutputTokens: maxOut, SupportsTools: tools, SupportsVision: vision,
		SupportsStreaming: true, quality: quality}
	if in == 0 && out == 0 {
		mi.Free = true
	}
	mi.Pricing = &pricing{InputPerMTok: in, OutputPerMTok: out, CacheReadPerMTok: cacheR, CacheWritePerMTok: cacheW}
	return mi
}

func reasoningModel(mi ModelInfo) ModelInfo { mi.reasoning = true; return mi }

// catalog: the main models of each provider, from the providers' public model and pricing pages.
// The first entry of a provider is its default for the auto strategy.
var catalog = []ModelInfo{
	cm("anthropic", "claude-sonnet-4-5", "Claude Sonnet 4.5", 200_000, 64_000, 95, true, true, 3, 15, 0.30, 3.75),
	cm("anthropic", "claude-opus-4-5", "Claude Opus 4.5", 200_000, 64_000, 97, true, true, 5, 25, 0.50, 6.25),
	cm("anthropic", "claude-opus-4-1", "Claude Opus 4.1", 200_000, 32_000, 93, true, true, 15, 75, 1.50, 18.75),
	cm("anthropic", "claude-haiku-4-5", "Claude Haiku 4.5", 200_000, 64_000, 85, true, true, 1, 5, 0.10, 1.25),
	cm("anthropic", "claude-3-5-haiku-latest", "Claude Haiku 3.5", 200_000, 8_192, 70, true, true, 0.80, 4, 0.08, 1),

	reasoningModel(cm("openai", "gpt-5", "GPT-5", 400_000, 128_000, 94, true, true, 1.25, 10, 0.125, 0)),
	reasoningModel(cm("openai", "gpt-5-mini", "GPT-5 mini", 400_000, 128_000, 84, true, true, 0.25, 2, 0.025, 0)),
	reasoningModel(cm("openai", "gpt-5-nano", "GPT-5 nano", 400_000, 128_000, 72, true, true, 0.05, 0.40, 0.005, 0)),
	cm("openai", "gpt-4.1", "GPT-4.1", 1_047_576, 32_768, 86, true, true, 2, 8, 0.50, 0),
	cm("openai", "gpt-4.1-mini", "GPT-4.1 mini", 1_047_576, 32_768, 78, true, true, 0.40, 1.60, 0.10, 0),
	cm("openai", "gpt-4o", "GPT-4o", 128_000, 16_384, 82, true, true, 2.50, 10, 1.25, 0),
	cm("openai", "gpt-4o-mini", "GPT-4o mini", 128_000, 16_384, 70, true, true, 0.15, 0.60, 0.075, 0),
	reasoningModel(cm("openai", "o3", "o3", 200_000, 100_000, 90, true, true, 2, 8, 0.50, 0)),
	reasoningModel(cm("openai", "o4-mini", "o4-mini", 200_000, 100_000, 83, true, true, 1.10, 4.40, 0.275, 0)),

	cm("google", "gemini-2.5-pro", "Gemini 2.5 Pro", 1_048_576, 65_536, 92, true, true, 1.25, 10, 0.125, 0),
	cm("google", "gemini-2.5-flash", "Gemini 2.5 Flash", 1_048_576, 65_536, 84, true, true, 0.30, 2.50, 0.03, 0),
	cm("google", "gemini-2.5-flash-lite", "Gemini 2.5 Flash-Lite", 1_048_576, 65_536, 74, true, true, 0.10, 0.40, 0.01, 0),
	cm("google", "gemini-2.0-flash", "Gemini 2.0 Flash", 1_048_576, 8_192, 72, true, true, 0.10, 0.40, 0.025, 0),

	cm("groq", "llama-3.3-70b-versatile", "Llama 3.3 70B (Groq)", 131_072, 32_768, 74, true, false, 0.59, 0.79, 0, 0),
	cm("groq", "openai/gpt-oss-120b", "GPT-OSS 120B (Groq)", 131_072, 65_536, 80, true, false, 0.15, 0.75, 0, 0),
	cm("groq", "llama-3.1-8b-instant", "Llama 3.1 8B (Groq)", 131_072, 131_072, 55, true, false, 0.05, 0.08, 0, 0),
	cm("groq", "qwen/qwen3-32b", "Qwen3 32B (Groq)", 131_072, 40_960, 72, true, false, 0.29, 0.59, 0, 0),

	cm("deepseek", "deepseek-chat", "DeepSeek V3.2 (chat)", 128_000, 8_192, 82, true, false, 0.28, 0.42, 0.028, 0),
	cm("deepseek", "deepseek-reasoner", "DeepSeek V3.2 (reasoner)", 128_000, 64_000, 84, true, false, 0.28, 0.42, 0.028, 0),

	cm("cerebras", "gpt-oss-120b", "GPT-OSS 120B (Cerebras)", 131_072, 40_960, 80, true, false, 0.35, 0.75, 0, 0),
	cm("cerebras", "llama-3.3-70b", "Llama 3.3 70B (Cerebras)", 128_000, 8_192, 74, true, false, 0.85, 1.20, 0, 0),
	cm("cerebras", "qwen-3-32b", "Qwen3 32B (Cerebras)", 131_072, 16_382, 72, true, false, 0.40, 0.80, 0, 0),
	cm("cerebras", "llama3.1-8b", "Llama 3.1 8B (Cerebras)", 32_768, 8_192, 55, true, false, 0.10, 0.10, 0, 0),

	cm("openrouter", "anthropic/claude-sonnet-4.5", "Claude Sonnet 4.5 (OpenRouter)", 1_000_000, 64_000, 95, true, true, 3, 15, 0.30, 3.75),
	cm("openrouter", "openai/gpt-4o-mini", "GPT-4o mini (OpenRouter)", 128_000, 16_384, 70, true, true, 0.15, 0.60, 0.075, 0),
	cm("openrouter", "meta-llama/llama-3.3-70b-instruct:free", "Llama 3.3 70B (OpenRouter, free)", 131_072, 8_192, 73, true, false, 0, 0, 0, 0),
	cm("openrouter", "deepseek/deepseek-chat-v3-0324:free", "DeepSeek V3 (OpenRouter, free)", 163_840, 8_192, 80, true, false, 0, 0, 0, 0),

	cm("mistral", "mistral-large-latest", "Mistral Large", 131_072, 8_192, 82, true, true, 2, 6, 0, 0),
	cm("mistral", "mistral-medium-latest", "Mistral Medium 3", 131_072, 8_192, 80, true, true, 0.40, 2, 0, 0),
	cm("mistral", "mistral-small-latest", "Mistral Small 3", 131_072, 8_192, 70, true, true, 0.10, 0.30, 0, 0),
	cm("mistral", "codestral-latest", "Codestral", 256_000, 8_192, 76, true, false, 0.30, 0.90, 0, 0),

	cm("together", "meta-llama/Llama-3.3-70B-Instruct-Turbo", "Llama 3.3 70B Turbo (Together)", 131_072, 8_192, 74, true, false, 0.88, 0.88, 0, 0),
	cm("together", "deepseek-ai/DeepSeek-V3", "DeepSeek V3 (Together)", 131_072, 8_192, 82, true, false, 1.25, 1.25, 0, 0),
	cm("together", "Qwen/Qwen2.5-72B-Instruct-Turbo", "Qwen2.5 72B Turbo (Together)", 32_768, 8_192, 72, true, false, 1.20, 1.20, 0, 0),
	cm("together", "meta-llama/Llama-3.3-70B-Instruct-Turbo-Free", "Llama 3.3 70B (Together, free)", 131_072, 8_192, 73, true, false, 0, 0, 0, 0),
}

// lookupModel finds a catalog entry by full id ("provider/name").
func lookupModel(id string) (ModelInfo, bool) {
	if i := slices.IndexFunc(catalog, func(mi ModelInfo) bool { return mi.ID == id }); i >= 0 {
		return catalog[i], true
	}
	return ModelInfo{}, false
}

// infoFor returns the catalog entry of provider/name or, for a model only known live (local models, new
// remote ones, self-hosted ones), a synthesised entry: free on a server of the user's own (own: a local
// provider, or a keyless self-hosted one — its cost is 0 and nothing warns that it is unpriced), the
// others without a price.
func infoFor(p *providerDef, name string, own bool) ModelInfo {
	if mi, ok := lookupModel(p.ID + "/" + name); ok {
		return mi
	}
	mi := ModelInfo{ID: p.ID + "/" + name, Provider: p.ID, Name: name, DisplayName: name,
		ContextWindow: 32_768, MaxOutputTokens: 4_096, SupportsTools: true, SupportsStreaming: true, quality: 40}
	if own {
		mi.Free = true
		mi.Pricing = &pricing{}
	}
	return mi
}

// ownServer: the provider is a server of the user's own machine or LAN (Ollama, LM Studio, or an
// OpenAI-compatible base URL with no key).
func (p *providerDef) ownServer(getenv func(string) string) bool {
	return p.Local || p.selfHosted(getenv)
}

func catalogNames(provider string) []string {
	var out []string
	for _, mi := range catalog {
		if mi.Provider == provider {
			out = append(out, mi.Name)
		}
	}
	return out
}

// modelsOf lists a provider's models for GET /v1/models: the live list when the probe returned one (the
// probe orders it: orderNames, catalog entries first), else the catalog. A catalog name is its catalog
// entry; another is what the provider said of it, else infoFor's.
func modelsOf(p providerDef, ps providerStatus, own bool) []ModelInfo {
	names := ps.Models
	if len(names) == 0 {
		names = catalogNames(p.ID)
	}
	out := make([]ModelInfo, 0, len(names))
	for _, n := range names {
		mi, told := ps.Infos[n]
		if _, inCatalog := lookupModel(p.ID + "/" + n); inCatalog || !told {
			mi = infoFor(&p, n, own)
		}
		out = append(out, mi)
	}
	return out
}

// liveHas reports whether a provider's live list serves a catalog name, also under a dated id
// (Anthropic lists claude-sonnet-4-5-20250929 for the alias claude-sonnet-4-5).
func liveHas(live []string, name string) bool {
	return slices.ContainsFunc(live, func(n string) bool { return n == name || undated(n) == name })
}

// undated strips a trailing -YYYYMMDD from a model id.
func undated(id string) string {
	if i := strings.LastIndexByte(id, '-'); i > 0 && len(id)-i == 9 && strings.Trim(id[i+1:], "0123456789") == "" {
		return id[:i]
	}
	return id
}

// costOf prices a usage with the model's catalog entry. InputTokens counts every prompt token, cached
// ones included; the cached share is priced at the cache rates when the catalog has them.
func costOf(mi ModelInfo, u Usage) float64 {
	if mi.Pricing == nil { // not in the catalog: counted as 0 (the run carries a warning)
		return 0
	}
	pr := *mi.Pricing
	readRate, writeRate := cmp.Or(pr.CacheReadPerMTok, pr.InputPerMTok), cmp.Or(pr.CacheWritePerMTok, pr.InputPerMTok)
	plain := max(u.InputTokens-u.CacheReadTokens-u.CacheWriteTokens, 0)
	c := float64(plain)*pr.InputPerMTok + float64(u.OutputTokens)*pr.OutputPerMTok +
		float64(u.CacheReadTokens)*readRate + float64(u.CacheWriteTokens)*writeRate
	return c / 1e6
}
