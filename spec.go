// spec.go — the agent spec: its types, strict parsing from YAML or JSON, defaults, and validation that
// reports every problem at once as `<dotted.path>: <message>` lines (API.md "Agent spec", DESIGN §3).
//
// Entry point: parseSpec(yamlText or JSON object) → (*AgentSpec with defaults, issues).
// Rules: unknown keys at any level are issues; YAML aliases are refused (no alias bombs); numbers keep
// their integer/float distinction; defaults are applied only after the document is valid.
package main

// AgentSpec is a validated agent spec with defaults applied. JSON and YAML names are the contract's.
type AgentSpec struct {
	APIVersion     string         `json:"apiVersion" yaml:"apiVersion"`
	Name           string         `json:"name" yaml:"name"`
	DisplayName    string         `json:"displayName,omitempty" yaml:"displayName,omitempty"`
	Version        string         `json:"version" yaml:"version"`
	Description    string         `json:"description" yaml:"description"`
	Model          string         `json:"model" yaml:"model"`
	FallbackModels []string       `json:"fallbackModels" yaml:"fallbackModels"`
	Temperature    *float64       `json:"temperature,omitempty" yaml:"temperature,omitempty"`
	Persona        string         `json:"persona" yaml:"persona"`
	Knowledge      []Knowledge    `json:"knowledge" yaml:"knowledge"`
	Examples       []Example      `json:"examples" yaml:"examples"`
	Tools          []string       `json:"tools" yaml:"tools"`
	Computer       ComputerSpec   `json:"computer" yaml:"computer"`
	Limits         Limits         `json:"limits" yaml:"limits"`
	Guardrails     Guardrails     `json:"guardrails" yaml:"guardrails"`
	Memory         MemorySpec     `json:"memory" yaml:"memory"`
	Triggers       []TriggerSpec  `json:"triggers" yaml:"triggers"`
	Metadata       map[string]any `json:"metadata" yaml:"metadata"`
	Origin         *Origin        `json:"origin,omitempty" yaml:"origin,omitempty"`
}

type Knowledge struct {
	Title   string `json:"title" yaml:"title"`
	Content string `json:"content" yaml:"content"`
	Source  string `json:"source,omitempty" yaml:"source,omitempty"`
}

type Example struct {
	User      string `json:"user" yaml:"user"`
	Assistant string `json:"assistant" yaml:"assistant"`
}

type Origin struct {
	Source       string `json:"source" yaml:"source"`
	TranscriptID string `json:"transcriptId,omitempty" yaml:"transcriptId,omitempty"`
	ImportedAt   string `json:"importedAt,omitempty" yaml:"importedAt,omitempty"`
	MessageCount *int   `json:"messageCount,omitempty" yaml:"messageCount,omitempty"`
}

// ComputerSpec is both the agent spec's `computer` block and the body of POST /v1/computers. Which keys
// each accepts differs (enabled only in the agent spec; name, user, labels only in the create body);
// the validators enforce that.
type ComputerSpec struct {
	Enabled        *bool             `json:"enabled,omitempty" yaml:"enabled,omitempty"`
	Name           string            `json:"name,omitempty" yaml:"name,omitempty"`
	Provider       string            `json:"provider,omitempty" yaml:"provider,omitempty"`
	Flavor         string            `json:"flavor" yaml:"flavor"`
	Image          string            `json:"image,omitempty" yaml:"image,omitempty"`
	CPUs           float64           `json:"cpus" yaml:"cpus"`
	MemoryMB       int               `json:"memoryMb" yaml:"memoryMb"`
	DiskMB         int               `json:"diskMb" yaml:"diskMb"`
	IdleTimeoutSec int               `json:"idleTimeoutSec" yaml:"idleTimeoutSec"`
	MaxLifetimeSec int               `json:"maxLifetimeSec" yaml:"maxLifetimeSec"`
	Packages       []string          `json:"packages" yaml:"packages"`
	Setup          string            `json:"setup,omitempty" yaml:"setup,omitempty"`
	Env            map[string]string `json:"env" yaml:"env"`
	Workdir        string            `json:"workdir" yaml:"workdir"`
	User           string            `json:"user,omitempty" yaml:"user,omitempty"`
	Persist        bool              `json:"persist" yaml:"persist"`
	Network        NetworkSpec       `json:"network" yaml:"network"`
	Mounts         []Mount           `json:"mounts" yaml:"mounts"`
	Labels         map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
}

// IsEnabled reports the agent spec's computer.enabled (default true).
func (c ComputerSpec) IsEnabled() bool { return c.Enabled == nil || *c.Enabled }

type NetworkSpec struct {
	Mode  string   `json:"mode" yaml:"mode"`
	Allow []string `json:"allow,omitempty" yaml:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty" yaml:"deny,omitempty"`
}

type Mount struct {
	Source   string `json:"source" yaml:"source"`
	Target   string `json:"target" yaml:"target"`
	Readonly *bool  `json:"readonly,omitempty" yaml:"readonly,omitempty"` // default true
}

type Limits struct {
	MaxSteps       int     `json:"maxSteps" yaml:"maxSteps"`
	MaxCostUSD     float64 `json:"maxCostUsd" yaml:"maxCostUsd"`
	MaxTokens      int     `json:"maxTokens" yaml:"maxTokens"`
	TimeoutSec     int     `json:"timeoutSec" yaml:"timeoutSec"`
	ExecTimeoutSec int     `json:"execTimeoutSec" yaml:"execTimeoutSec"`
	MaxOutputBytes int     `json:"maxOutputBytes" yaml:"maxOutputBytes"`
}

type Guardrails struct {
	ApprovalMode  string   `json:"approvalMode" yaml:"approvalMode"`
	DenyCommands  []string `json:"denyCommands" yaml:"denyCommands"`
	AllowCommands []string `json:"allowCommands" yaml:"allowCommands"`
	Refuse        []string `json:"refuse" yaml:"refuse"`
	RedactSecrets bool     `json:"redactSecrets" yaml:"redactSecrets"`
}

type MemorySpec struct {
	Enabled     bool   `json:"enabled" yaml:"enabled"`
	Backend     string `json:"backend" yaml:"backend"`
	WindowTurns int    `json:"windowTurns" yaml:"windowTurns"`
	Summarise   bool   `json:"summarise" yaml:"summarise"`
}

// TriggerSpec is the union of the seven trigger variants, discriminated on Type.
type TriggerSpec struct {
	Type        string   `json:"type" yaml:"type"`
	Path        string   `json:"path,omitempty" yaml:"path,omitempty"`
	Auth        string   `json:"auth,omitempty" yaml:"auth,omitempty"`
	Schedule    string   `json:"schedule,omitempty" yaml:"schedule,omitempty"`
	Prompt      string   `json:"prompt,omitempty" yaml:"prompt,omitempty"`
	Secret      string   `json:"secret,omitempty" yaml:"secret,omitempty"`
	Channels    []string `json:"channels,omitempty" yaml:"channels,omitempty"`
	MentionOnly *bool    `json:"mentionOnly,omitempty" yaml:"mentionOnly,omitempty"`
	Allowlist   []string `json:"allowlist,omitempty" yaml:"allowlist,omitempty"`
}
