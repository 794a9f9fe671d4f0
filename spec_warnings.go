// spec_warnings.go — what is legal in an agent spec but will not work: unknown tool names, a model no
// provider serves. The contract keeps these non-fatal (docs/API.md: an unknown tool name is dropped), so
// they are warnings, never issues: a spec with warnings is still ok and is still stored.
//
// Entry points: specWarnings (offline: tools, and model names agentd cannot resolve at all — used by
// `agentd validate`), (*server).specWarnings (adds what only the server knows: its MCP servers and whether
// a provider it reaches serves the model — POST /v1/agents/validate, read by `agentd apply`).
// Rules: each warning is one line `<dotted.path>: <name>: <what>`, with the nearest known name when one is
// close ("did you mean files?").
package main

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// knownToolNames is every name `tools` accepts: the bundles and the tools of the catalog.
func knownToolNames() []string {
	names := slices.Collect(maps.Keys(toolBundles))
	for n := range toolCatalog() {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// specWarnings is what can be said without a server: unknown tools, and model names that are neither
// provider/model, an alias, a catalog name nor a strategy (aliases of config.yaml are the server's).
func specWarnings(spec *AgentSpec) []string {
	out := toolWarnings(spec)
	for _, m := range specModels(spec) {
		if m.name != "" && !modelNameKnown(m.name) {
			out = append(out, fmt.Sprintf("%s: %s: not a model, alias or strategy agentd knows%s",
				modelPath(m), m.name, didYouMean(m.name, knownModelNames())))
		}
	}
	return out
}

func toolWarnings(spec *AgentSpec) []string {
	var out []string
	known := knownToolNames()
	for i, t := range spec.Tools {
		if strings.HasPrefix(t, "mcp:") || slices.Contains(known, t) {
			continue
		}
		out = append(out, fmt.Sprintf("tools.%d: %s: unknown tool (it is dropped)%s", i, t, didYouMean(t, known)))
	}
	return out
}

// specWarnings on the server: unknown tools, `mcp:` entries naming no configured server, and each named
// model (model, fallbackModels) that no reachable provider serves.
func (s *server) specWarnings(spec *AgentSpec) []string {
	out := toolWarnings(spec)
	servers := slices.Collect(maps.Keys(s.cfg.MCPServers))
	for i, t := range spec.Tools {
		name, ok := strings.CutPrefix(t, "mcp:")
		if name, _, _ = strings.Cut(name, "/"); ok && !slices.Contains(servers, name) {
			out = append(out, fmt.Sprintf("tools.%d: %s: no MCP server %q in config.yaml's mcpServers%s", i, t, name, didYouMean(name, servers)))
		}
	}
	for _, m := range specModels(spec) {
		if m.name == "" {
			continue
		}
		if why := s.models.unreachable(m.name); why != "" {
			hint := ""
			if !modelNameKnown(m.name) {
				hint = didYouMean(m.name, knownModelNames())
			}
			out = append(out, fmt.Sprintf("%s: %s: no model provider this server reaches serves it (%s)%s", modelPath(m), m.name, why, hint))
		}
	}
	return out
}

// unreachable is "" when a provider this server reaches serves name, else why not. It resolves the name
// the way a run's first call would (aliases, strategies, keys, probes of local providers) without
// calling any model.
func (m *modelService) unreachable(name string) string {
	if m == nil {
		return "no model service"
	}
	_, _, err := m.EstimateCost(ChatRequest{Model: name, Messages: []ModelMessage{textMessage("user", "x")}})
	if err == nil {
		return ""
	}
	ae := asAPIError(err)
	return ae.Code + ": " + ae.Message
}

type namedModel struct {
	name     string
	fallback int // -1 for `model`
}

func specModels(spec *AgentSpec) []namedModel {
	out := []namedModel{{name: spec.Model, fallback: -1}}
	for i, f := range spec.FallbackModels {
		out = append(out, namedModel{name: f, fallback: i})
	}
	return out
}

func modelPath(m namedModel) string {
	if m.fallback < 0 {
		return "model"
	}
	return fmt.Sprintf("fallbackModels.%d", m.fallback)
}

// modelNameKnown reports whether name resolves without the server's config: a strategy, a built-in
// alias, provider/model of a known provider, or a catalog name.
func modelNameKnown(name string) bool {
	switch name {
	case "auto", "free", "local":
		return true
	}
	if pid, rest, ok := strings.Cut(name, "/"); ok && providerByID(pid) != nil && rest != "" {
		return true
	}
	if _, ok := builtinAliases[name]; ok {
		return true
	}
	return slices.ContainsFunc(catalog, func(mi ModelInfo) bool { return mi.Name == name })
}

func knownModelNames() []string {
	names := append([]string{"auto", "free", "local"}, slices.Collect(maps.Keys(builtinAliases))...)
	for _, mi := range catalog {
		names = append(names, mi.Name, mi.ID)
	}
	sort.Strings(names)
	return names
}

// didYouMean is "; did you mean X?" for the known name nearest to name (cli.go's nearest: the one
// measure of a typo), else "".
func didYouMean(name string, known []string) string {
	if best := nearest(name, known); best != "" {
		return "; did you mean " + best + "?"
	}
	return ""
}
