// spec.go — the agent spec: its types, defaults, validation that reports every problem at once as
// `<dotted.path>: <message>` lines (docs/API.md "Agent spec", DESIGN §3), and rendering a spec back to YAML.
//
// Entry points: parseSpecYAML(text) and parseSpecJSON(raw) → (*AgentSpec with defaults, issues);
// renderSpecYAML(spec); parseComputerCreateJSON(raw) for the POST /v1/computers body; specIssuesError.
// Rules: both inputs first become one neutral value tree (spec_tree.go), then one validator walks it, so
// YAML and JSON give the same issues. Unknown keys at any level are issues; integers and floats are told
// apart; defaults fill only keys that were absent; a spec with any issue is never returned.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

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

// MarshalJSON keeps the defaulted empty lists of discord/slack `channels` and telegram `allowlist` (docs/API.md
// gives [] as their default), which omitempty would drop; other types still omit fields they do not have.
func (t TriggerSpec) MarshalJSON() ([]byte, error) {
	type plain TriggerSpec
	out := struct {
		plain
		Channels  *[]string `json:"channels,omitempty"`
		Allowlist *[]string `json:"allowlist,omitempty"`
	}{plain: plain(t)}
	if t.Channels != nil {
		out.Channels = &t.Channels
	}
	if t.Allowlist != nil {
		out.Allowlist = &t.Allowlist
	}
	return json.Marshal(out)
}

// ---- the validator ----

// specCheck collects issues while it walks a tree; every accessor reports and carries on, so one pass
// finds every problem.
type specCheck struct{ issues []string }

func (c *specCheck) add(path, msg string) { c.issues = append(c.issues, issueLine(path, msg)) }

func (c *specCheck) expected(path, want string, got any) {
	c.add(path, "Expected "+want+", received "+typeName(got))
}

// object checks that v is an object holding only the allowed keys (any key when allowed is nil: a record).
func (c *specCheck) object(path string, v any, allowed []string) *specObj {
	o, ok := v.(*specObj)
	if !ok {
		c.expected(path, "object", v)
		return nil
	}
	var unknown []string
	for _, k := range o.keys {
		if allowed != nil && !slices.Contains(allowed, k) {
			unknown = append(unknown, "'"+k+"'")
		}
	}
	if len(unknown) > 0 {
		c.add(path, "Unrecognized key(s) in object: "+strings.Join(unknown, ", "))
	}
	for _, k := range o.dups {
		c.add(joinPath(path, k), "Duplicate key")
	}
	return o
}

// val is get without the path: paths are built only when an issue is reported, which keeps validating
// a valid spec cheap.
func (c *specCheck) val(o *specObj, path, key string, required bool) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[key]
	if !ok && required {
		c.add(joinPath(path, key), "Required")
	}
	return v, ok
}

// get returns the value of key and whether it is present; a missing required key is reported.
func (c *specCheck) get(o *specObj, path, key string, required bool) (any, string, bool) {
	v, ok := c.val(o, path, key, required)
	return v, joinPath(path, key), ok
}

// str reads a string field; max < 0 means no cap, nonEmpty requires at least one character.
func (c *specCheck) str(o *specObj, path, key string, required bool, max int, nonEmpty bool, dst *string) {
	v, ok := c.val(o, path, key, required)
	if !ok {
		return
	}
	s, isStr := v.(string)
	if !isStr {
		c.expected(joinPath(path, key), "string", v)
		return
	}
	if nonEmpty && s == "" {
		c.add(joinPath(path, key), "String must contain at least 1 character(s)")
		return
	}
	if max >= 0 && utf8.RuneCountInString(s) > max {
		c.add(joinPath(path, key), fmt.Sprintf("String must contain at most %d character(s)", max))
		return
	}
	*dst = s
}

func (c *specCheck) strList(o *specObj, path, key string, dst *[]string) {
	v, ok := c.val(o, path, key, false)
	if !ok {
		return
	}
	list, isList := v.([]any)
	if !isList {
		c.expected(joinPath(path, key), "array", v)
		return
	}
	out := make([]string, 0, len(list))
	for i, x := range list {
		s, isStr := x.(string)
		if !isStr {
			c.expected(joinPath(joinPath(path, key), strconv.Itoa(i)), "string", x)
			continue
		}
		out = append(out, s)
	}
	*dst = out
}

func (c *specCheck) strMap(o *specObj, path, key string, dst *map[string]string) {
	v, ok := c.val(o, path, key, false)
	if !ok {
		return
	}
	m := c.object(joinPath(path, key), v, nil)
	if m == nil {
		return
	}
	out := make(map[string]string, len(m.keys))
	for _, k := range m.keys {
		s, isStr := m.vals[k].(string)
		if !isStr {
			c.expected(joinPath(joinPath(path, key), k), "string", m.vals[k])
			continue
		}
		out[k] = s
	}
	*dst = out
}

func (c *specCheck) boolean(o *specObj, path, key string, dst *bool) {
	v, ok := c.val(o, path, key, false)
	if !ok {
		return
	}
	b, isBool := v.(bool)
	if !isBool {
		c.expected(joinPath(path, key), "boolean", v)
		return
	}
	*dst = b
}

// optional reads a key whose absence means unset: nil when absent or invalid, else the value read.
func optional[T any](c *specCheck, o *specObj, key string, read func(dst *T)) *T {
	if _, present := o.vals[key]; !present {
		return nil
	}
	var v T
	n := len(c.issues)
	if read(&v); len(c.issues) > n {
		return nil
	}
	return &v
}

// bounds are a number's limits: lo/hi inclusive unless loOpen; has* say which apply.
type bounds struct {
	lo, hi        float64
	hasLo, hasHi  bool
	loOpen, isInt bool
}

func (c *specCheck) checkNum(p string, v any, b bounds) (specNum, bool) {
	n, isNum := v.(specNum)
	if !isNum {
		c.expected(p, "number", v)
		return n, false
	}
	if n.huge != "" {
		c.add(p, "number "+n.huge+" is out of range")
		return n, false
	}
	if b.isInt && !n.isInt {
		if n.f == math.Trunc(n.f) {
			c.add(p, fmt.Sprintf("Number must be less than or equal to %d", maxSafeInt))
		} else {
			c.add(p, "Expected integer, received float")
		}
		return n, false
	}
	okay := true
	if b.hasLo {
		if b.loOpen && n.f <= b.lo {
			c.add(p, "Number must be greater than "+fmtNum(b.lo))
			okay = false
		} else if !b.loOpen && n.f < b.lo {
			c.add(p, "Number must be greater than or equal to "+fmtNum(b.lo))
			okay = false
		}
	}
	if b.hasHi && n.f > b.hi {
		c.add(p, "Number must be less than or equal to "+fmtNum(b.hi))
		okay = false
	}
	return n, okay
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func (c *specCheck) number(o *specObj, path, key string, b bounds, dst *float64) {
	v, ok := c.val(o, path, key, false)
	if !ok {
		return
	}
	if n, good := c.checkNum(joinPath(path, key), v, b); good {
		*dst = n.f
	}
}

func (c *specCheck) integer(o *specObj, path, key string, b bounds, dst *int) {
	f := float64(*dst) // kept when the value is absent or invalid
	b.isInt = true
	c.number(o, path, key, b, &f)
	*dst = int(f)
}

func (c *specCheck) enum(o *specObj, path, key string, values []string, dst *string) {
	v, ok := c.val(o, path, key, false)
	if !ok {
		return
	}
	s, isStr := v.(string)
	if !isStr {
		c.expected(joinPath(path, key), "string", v)
		return
	}
	if !slices.Contains(values, s) {
		c.add(joinPath(path, key), fmt.Sprintf("Invalid enum value. Expected %s, received '%s'", quoteList(values), s))
		return
	}
	*dst = s
}

func quoteList(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = "'" + v + "'"
	}
	return strings.Join(q, " | ")
}

// objList walks an array of objects, calling each with the element's path and object.
func (c *specCheck) objList(o *specObj, path, key string, allowed []string, each func(p string, e *specObj)) bool {
	v, ok := c.val(o, path, key, false)
	if !ok {
		return false
	}
	list, isList := v.([]any)
	if !isList {
		c.expected(joinPath(path, key), "array", v)
		return false
	}
	for i, x := range list {
		ep := joinPath(joinPath(path, key), strconv.Itoa(i))
		if e := c.object(ep, x, allowed); e != nil {
			each(ep, e)
		}
	}
	return true
}

// ---- the agent spec schema ----

var (
	specTopKeys = []string{"apiVersion", "name", "displayName", "version", "description", "model",
		"fallbackModels", "temperature", "persona", "knowledge", "examples", "tools", "computer", "limits",
		"guardrails", "memory", "triggers", "metadata", "origin"}
	agentComputerKeys = []string{"enabled", "provider", "flavor", "image", "cpus", "memoryMb", "diskMb",
		"idleTimeoutSec", "maxLifetimeSec", "packages", "setup", "env", "workdir", "persist", "network", "mounts"}
	createComputerKeys = []string{"name", "provider", "image", "flavor", "cpus", "memoryMb", "diskMb",
		"idleTimeoutSec", "maxLifetimeSec", "network", "env", "mounts", "workdir", "user", "persist",
		"packages", "setup", "labels"}
	triggerKeys = map[string][]string{
		"http": {"type", "path", "auth"}, "cron": {"type", "schedule", "prompt"},
		"webhook": {"type", "path", "secret"}, "discord": {"type", "channels", "mentionOnly"},
		"slack": {"type", "channels", "mentionOnly"}, "telegram": {"type", "allowlist"}, "cli": {"type"},
	}
	triggerTypes = []string{"http", "cron", "webhook", "discord", "slack", "telegram", "cli"}
	agentNameRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
)

const (
	specAPIVersion  = "agent/v1"
	nameRuleMessage = "name must be lowercase letters, digits and dashes, starting with a letter or digit"
)

// defaultSpec is a spec with every default of docs/API.md; validation overwrites what the document sets.
func defaultSpec() AgentSpec {
	return AgentSpec{
		APIVersion: specAPIVersion, Version: "0.1.0", Model: "auto",
		FallbackModels: []string{}, Knowledge: []Knowledge{}, Examples: []Example{},
		Tools:      []string{"computer"},
		Computer:   defaultComputerSpec(),
		Limits:     Limits{MaxSteps: 24, MaxCostUSD: 0.5, MaxTokens: 200000, TimeoutSec: 300, ExecTimeoutSec: 120, MaxOutputBytes: 262144},
		Guardrails: Guardrails{ApprovalMode: "auto", DenyCommands: []string{}, AllowCommands: []string{}, Refuse: []string{}, RedactSecrets: true},
		Memory:     MemorySpec{Backend: "sqlite", WindowTurns: 20, Summarise: true},
		Triggers:   []TriggerSpec{{Type: "cli"}},
		Metadata:   map[string]any{},
	}
}

// defaultComputerSpec holds the computer defaults shared by agent specs and POST /v1/computers.
func defaultComputerSpec() ComputerSpec {
	return ComputerSpec{
		Flavor: "base", CPUs: 2, MemoryMB: 2048, DiskMB: 2048, IdleTimeoutSec: 900,
		Packages: []string{}, Env: map[string]string{}, Workdir: "/work",
		Network: NetworkSpec{Mode: "egress"}, Mounts: []Mount{},
	}
}

// parseSpecYAML parses and validates an agent spec written in YAML. It returns the spec with defaults
// applied, or nil and every issue as a `<path>: <message>` line.
func parseSpecYAML(text string) (*AgentSpec, []string) { return validateSpecTree(yamlTree(text)) }

// parseSpecJSON is parseSpecYAML for a JSON object (the `spec` of a request body).
func parseSpecJSON(raw []byte) (*AgentSpec, []string) { return validateSpecTree(jsonTree(raw)) }

// validateSpecTree validates a tree; a document that did not become one (err) is its one issue.
func validateSpecTree(tree any, err error) (*AgentSpec, []string) {
	if err != nil {
		return nil, []string{err.Error()}
	}
	c := &specCheck{}
	spec := defaultSpec()
	o := c.object("", tree, specTopKeys)
	if o == nil {
		return nil, c.issues
	}

	if v, p, ok := c.get(o, "", "apiVersion", false); ok && v != specAPIVersion {
		c.add(p, `Invalid literal value, expected "`+specAPIVersion+`"`)
	}
	if v, p, ok := c.get(o, "", "name", true); ok {
		switch s, isStr := v.(string); {
		case !isStr:
			c.expected(p, "string", v)
		case s == "":
			c.add(p, "String must contain at least 1 character(s)")
		case len(s) > 64:
			c.add(p, "String must contain at most 64 character(s)")
		case !agentNameRe.MatchString(s):
			c.add(p, nameRuleMessage)
		default:
			spec.Name = s
		}
	}
	c.str(o, "", "displayName", false, 96, false, &spec.DisplayName)
	c.str(o, "", "version", false, -1, false, &spec.Version)
	c.str(o, "", "description", false, 280, false, &spec.Description)
	c.str(o, "", "model", false, -1, false, &spec.Model)
	c.strList(o, "", "fallbackModels", &spec.FallbackModels)
	spec.Temperature = optional(c, o, "temperature", func(t *float64) {
		c.number(o, "", "temperature", bounds{lo: 0, hi: 2, hasLo: true, hasHi: true}, t)
	})
	c.str(o, "", "persona", false, -1, false, &spec.Persona)
	c.objList(o, "", "knowledge", []string{"title", "content", "source"}, func(p string, e *specObj) {
		var k Knowledge
		c.str(e, p, "title", true, -1, false, &k.Title)
		c.str(e, p, "content", true, -1, false, &k.Content)
		c.str(e, p, "source", false, -1, false, &k.Source)
		spec.Knowledge = append(spec.Knowledge, k)
	})
	c.objList(o, "", "examples", []string{"user", "assistant"}, func(p string, e *specObj) {
		var x Example
		c.str(e, p, "user", true, -1, false, &x.User)
		c.str(e, p, "assistant", true, -1, false, &x.Assistant)
		spec.Examples = append(spec.Examples, x)
	})
	c.strList(o, "", "tools", &spec.Tools)
	if v, p, ok := c.get(o, "", "computer", false); ok {
		if co := c.object(p, v, agentComputerKeys); co != nil {
			c.computer(co, p, &spec.Computer, false)
		}
	}
	if v, p, ok := c.get(o, "", "limits", false); ok {
		if lo := c.object(p, v, []string{"maxSteps", "maxCostUsd", "maxTokens", "timeoutSec", "execTimeoutSec", "maxOutputBytes"}); lo != nil {
			l := &spec.Limits
			c.integer(lo, p, "maxSteps", bounds{lo: 1, hi: 500, hasLo: true, hasHi: true}, &l.MaxSteps)
			c.number(lo, p, "maxCostUsd", bounds{lo: 0, hasLo: true}, &l.MaxCostUSD)
			positive := bounds{lo: 0, hasLo: true, loOpen: true}
			c.integer(lo, p, "maxTokens", positive, &l.MaxTokens)
			c.integer(lo, p, "timeoutSec", positive, &l.TimeoutSec)
			c.integer(lo, p, "execTimeoutSec", positive, &l.ExecTimeoutSec)
			c.integer(lo, p, "maxOutputBytes", positive, &l.MaxOutputBytes)
		}
	}
	if v, p, ok := c.get(o, "", "guardrails", false); ok {
		if g := c.object(p, v, []string{"approvalMode", "denyCommands", "allowCommands", "refuse", "redactSecrets"}); g != nil {
			c.enum(g, p, "approvalMode", []string{"auto", "ask", "readonly"}, &spec.Guardrails.ApprovalMode)
			c.strList(g, p, "denyCommands", &spec.Guardrails.DenyCommands)
			c.strList(g, p, "allowCommands", &spec.Guardrails.AllowCommands)
			c.strList(g, p, "refuse", &spec.Guardrails.Refuse)
			c.boolean(g, p, "redactSecrets", &spec.Guardrails.RedactSecrets)
		}
	}
	if v, p, ok := c.get(o, "", "memory", false); ok {
		if m := c.object(p, v, []string{"enabled", "backend", "windowTurns", "summarise"}); m != nil {
			c.boolean(m, p, "enabled", &spec.Memory.Enabled)
			c.enum(m, p, "backend", []string{"sqlite", "memory", "file"}, &spec.Memory.Backend)
			c.integer(m, p, "windowTurns", bounds{lo: 0, hasLo: true, loOpen: true}, &spec.Memory.WindowTurns)
			c.boolean(m, p, "summarise", &spec.Memory.Summarise)
		}
	}
	if v, p, ok := c.get(o, "", "triggers", false); ok {
		spec.Triggers = c.triggers(p, v)
	}
	if v, p, ok := c.get(o, "", "metadata", false); ok {
		if c.object(p, v, nil) != nil {
			spec.Metadata = plainValue(v).(map[string]any)
		}
	}
	if v, p, ok := c.get(o, "", "origin", false); ok {
		if og := c.object(p, v, []string{"source", "transcriptId", "importedAt", "messageCount"}); og != nil {
			var or Origin
			c.str(og, p, "source", true, -1, false, &or.Source)
			c.str(og, p, "transcriptId", false, -1, false, &or.TranscriptID)
			c.str(og, p, "importedAt", false, -1, false, &or.ImportedAt)
			or.MessageCount = optional(c, og, "messageCount", func(n *int) {
				c.integer(og, p, "messageCount", bounds{lo: 0, hasLo: true}, n)
			})
			spec.Origin = &or
		}
	}
	// The setup runs as its machine's first exec: judged now by the same policy, with these guardrails.
	if ae := setupRefused(spec.Computer.Setup, spec.Guardrails.policy()); ae != nil {
		c.add("computer.setup", strings.TrimPrefix(ae.Message, "setup: ")+" ("+ae.Hint+")")
	}
	if len(c.issues) > 0 {
		return nil, c.issues
	}
	if spec.Computer.Enabled == nil {
		enabled := true
		spec.Computer.Enabled = &enabled
	}
	return &spec, nil
}

// packageName is the grammar of Debian and Alpine package names, with an optional =version or :arch;
// anything else never reaches the package manager (an `-o ...` would be an option).
var packageName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9+._~-]*(?::[a-z0-9]+)?(?:=[A-Za-z0-9+._~:-]+)?$`)

// computer validates a computer block into dst, which already holds the defaults. create selects the
// keys of the POST /v1/computers body (name, user, labels) over the agent spec's (enabled).
func (c *specCheck) computer(o *specObj, p string, dst *ComputerSpec, create bool) {
	if create {
		c.str(o, p, "name", false, 64, false, &dst.Name)
		if dst.Name != "" && !computerNameRE.MatchString(dst.Name) {
			c.add(joinPath(p, "name"), "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
		}
		c.str(o, p, "user", false, -1, false, &dst.User)
		c.strMap(o, p, "labels", &dst.Labels)
	} else {
		dst.Enabled = optional(c, o, "enabled", func(b *bool) { c.boolean(o, p, "enabled", b) })
	}
	c.str(o, p, "provider", false, -1, false, &dst.Provider)
	c.enum(o, p, "flavor", flavors, &dst.Flavor)
	c.str(o, p, "image", false, -1, false, &dst.Image)
	c.number(o, p, "cpus", bounds{lo: 0, hi: 64, hasLo: true, hasHi: true, loOpen: true}, &dst.CPUs)
	c.integer(o, p, "memoryMb", bounds{lo: 0, hi: 131072, hasLo: true, hasHi: true, loOpen: true}, &dst.MemoryMB)
	c.integer(o, p, "diskMb", bounds{lo: 0, hasLo: true, loOpen: true}, &dst.DiskMB)
	c.integer(o, p, "idleTimeoutSec", bounds{lo: 0, hasLo: true}, &dst.IdleTimeoutSec)
	c.integer(o, p, "maxLifetimeSec", bounds{lo: 0, hasLo: true}, &dst.MaxLifetimeSec)
	c.strList(o, p, "packages", &dst.Packages)
	c.str(o, p, "setup", false, -1, false, &dst.Setup)
	for i, pkg := range dst.Packages {
		if !packageName.MatchString(pkg) {
			c.add(joinPath(p, "packages."+strconv.Itoa(i)), fmt.Sprintf("invalid package name %q: letters, digits and + . - _ : = ~ (a version pin as name=1.2), starting with a letter or digit", pkg))
		}
	}
	c.strMap(o, p, "env", &dst.Env)
	for k, v := range dst.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			c.add(joinPath(p, "env."+strings.ReplaceAll(k, "\x00", `\0`)), "invalid variable name")
		} else if strings.IndexByte(v, 0) >= 0 {
			c.add(joinPath(p, "env."+k), "must not contain a NUL byte")
		}
	}
	c.str(o, p, "workdir", false, -1, true, &dst.Workdir)
	if dst.Workdir != "" && !strings.HasPrefix(dst.Workdir, "/") {
		c.add(joinPath(p, "workdir"), "must be an absolute path")
	}
	c.boolean(o, p, "persist", &dst.Persist)
	if v, np, ok := c.get(o, p, "network", false); ok {
		if n := c.object(np, v, []string{"mode", "allow", "deny"}); n != nil {
			c.enum(n, np, "mode", []string{"none", "egress", "full"}, &dst.Network.Mode)
			c.strList(n, np, "allow", &dst.Network.Allow)
			c.strList(n, np, "deny", &dst.Network.Deny)
			for i, h := range dst.Network.Allow {
				if strings.Contains(strings.TrimPrefix(h, "*."), "*") {
					c.add(joinPath(np, "allow."+strconv.Itoa(i)), "only one leading '*.' wildcard is supported")
				}
			}
		}
	}
	c.objList(o, p, "mounts", []string{"source", "target", "readonly"}, func(mp string, e *specObj) {
		m := Mount{}
		c.str(e, mp, "source", true, -1, true, &m.Source)
		c.str(e, mp, "target", true, -1, true, &m.Target)
		if m.Target != "" {
			if err := checkMountTarget(m.Target); err != nil {
				c.add(joinPath(mp, "target"), err.Error())
			}
		}
		readonly := true
		c.boolean(e, mp, "readonly", &readonly)
		m.Readonly = &readonly
		dst.Mounts = append(dst.Mounts, m)
	})
}

// triggers validates the discriminated union of trigger variants and fills each variant's defaults.
func (c *specCheck) triggers(p string, v any) []TriggerSpec {
	list, isList := v.([]any)
	if !isList {
		c.expected(p, "array", v)
		return nil
	}
	out := make([]TriggerSpec, 0, len(list))
	mounted := map[string]string{} // "http /path" → the path of the trigger that has it
	for i, x := range list {
		tp := joinPath(p, strconv.Itoa(i))
		o, isObj := x.(*specObj)
		if !isObj {
			c.expected(tp, "object", x)
			continue
		}
		tv, typePath, ok := c.get(o, tp, "type", true)
		if !ok {
			continue
		}
		typ, _ := tv.(string)
		keys, known := triggerKeys[typ]
		if !known {
			c.add(typePath, "Invalid discriminator value. Expected "+quoteList(triggerTypes))
			continue
		}
		c.object(tp, o, keys)
		t := TriggerSpec{Type: typ}
		switch typ {
		case "http":
			t.Path, t.Auth = "/", "token"
			c.str(o, tp, "path", false, -1, true, &t.Path)
			c.enum(o, tp, "auth", []string{"none", "token"}, &t.Auth)
		case "cron":
			c.str(o, tp, "schedule", true, -1, true, &t.Schedule)
			c.str(o, tp, "prompt", true, -1, true, &t.Prompt)
			if t.Schedule != "" {
				if _, err := parseCron(t.Schedule); err != nil {
					c.add(joinPath(tp, "schedule"), err.Error())
				}
			}
		case "webhook":
			c.str(o, tp, "path", true, -1, true, &t.Path)
			c.str(o, tp, "secret", false, -1, false, &t.Secret)
		case "discord", "slack":
			mention := true
			t.Channels = []string{}
			c.strList(o, tp, "channels", &t.Channels)
			c.boolean(o, tp, "mentionOnly", &mention)
			t.MentionOnly = &mention
		case "telegram":
			t.Allowlist = []string{}
			c.strList(o, tp, "allowlist", &t.Allowlist)
		}
		if t.Type == "http" || t.Type == "webhook" {
			pp := joinPath(tp, "path")
			switch key := t.Type + " " + mountPath(t.Path); {
			case t.Path != "" && !strings.HasPrefix(t.Path, "/"):
				c.add(pp, "must start with /")
			case mounted[key] != "":
				c.add(pp, fmt.Sprintf("%s trigger path %s is already used by %s", t.Type, mountPath(t.Path), mounted[key]))
			default:
				mounted[key] = tp
			}
		}
		out = append(out, t)
	}
	return out
}

// parseComputerCreateJSON validates the body of POST /v1/computers with the same rules and messages as
// the agent spec's computer block (plus name, user and labels; without enabled), defaults applied.
func parseComputerCreateJSON(raw []byte) (*ComputerSpec, []string) {
	tree, err := jsonTree(raw)
	if err != nil {
		return nil, []string{err.Error()}
	}
	c := &specCheck{}
	spec := defaultComputerSpec()
	if o := c.object("", tree, createComputerKeys); o != nil {
		c.computer(o, "", &spec, true)
	}
	if len(c.issues) > 0 {
		return nil, c.issues
	}
	return &spec, nil
}

// ---- rendering ----

// renderSpecYAML renders a spec (defaults applied) as YAML that parseSpecYAML accepts back unchanged.
// The node tree is built here from the spec's JSON (not by yaml.v3's Node.Encode, which loses some
// multi-line strings), so every scalar's style is chosen on purpose: multi-line text as a readable
// literal block unless its shape cannot survive one (blank-only, leading blanks, trailing spaces, CR),
// in which case it is double-quoted.
func renderSpecYAML(spec *AgentSpec) string {
	raw, err := json.Marshal(spec)
	if err != nil {
		return ""
	}
	tree, err := jsonTree(raw)
	if err != nil {
		return string(raw) + "\n" // JSON is valid YAML
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(yamlNodeOf(tree)); err != nil {
		return string(raw) + "\n"
	}
	enc.Close()
	return b.String()
}

func yamlNodeOf(v any) *yaml.Node {
	switch t := v.(type) {
	case *specObj:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		if len(t.keys) == 0 {
			n.Style = yaml.FlowStyle
		}
		for _, k := range t.keys {
			key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}
			if strings.ContainsAny(k, "\n\r\t") {
				key.Style = yaml.DoubleQuotedStyle // a block scalar cannot be a simple key
			}
			n.Content = append(n.Content, key, yamlNodeOf(t.vals[k]))
		}
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if len(t) == 0 {
			n.Style = yaml.FlowStyle
		}
		for _, x := range t {
			n.Content = append(n.Content, yamlNodeOf(x))
		}
		return n
	case string:
		n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t}
		if strings.ContainsAny(t, "\n\r") {
			n.Style = yaml.LiteralStyle
			if blockUnsafe(t) {
				n.Style = yaml.DoubleQuotedStyle
			}
		}
		return n
	case specNum:
		if t.huge != "" {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: t.huge}
		}
		if t.isInt {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(int64(t.f), 10)}
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(t.f, 'g', -1, 64)}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t)}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
}

// blockUnsafe reports text a literal block scalar would not carry back byte for byte.
func blockUnsafe(v string) bool {
	if strings.TrimSpace(v) == "" || strings.ContainsAny(v, "\r\t") {
		return true
	}
	switch v[0] {
	case ' ', '\n':
		return true
	}
	return strings.Contains(v, " \n") || strings.HasSuffix(v, " ") || strings.Contains(v, "\n\n\n") && strings.HasSuffix(v, "\n\n")
}

// specIssuesError is the 422 for an invalid spec: the first issue in the message, all in details.issues.
func specIssuesError(what string, issues []string) *apiError {
	msg := "invalid " + what + ": " + issues[0]
	if len(issues) > 1 {
		msg += fmt.Sprintf(" (and %d more)", len(issues)-1)
	}
	return errorf(codeSpecInvalid, "%s", msg).
		withHint("fix every line of details.issues; POST /v1/agents/validate checks a spec without saving it").
		withDetail("issues", issues)
}
