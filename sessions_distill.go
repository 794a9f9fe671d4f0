// sessions_distill.go — turning a transcript into an agent spec that does the task again.
//
// Entry point: sessionService.distill (used by POST /v1/sessions/distill and its stream).
//
// Rules (docs/API.md Sessions 2 and 4, docs/DESIGN.md §7a): the free heuristic path needs no model: the
// tools the conversation used map to agent tools (a shell makes needsComputer true, the commands suggest
// a flavor), instructions the user repeated become persona lines, long pasted text becomes knowledge,
// user/assistant pairs become examples. With useModel exactly true a model (the body's model, else the
// router's choice) writes the fields from the transcript, under the direct-chat cost ceiling: a long
// transcript is read whole in parts (distillChunks), the model keeping notes from part to part, for as
// many parts as the ceiling allows, and distilled.read says how much was read; any model failure falls
// back to the heuristic result with a note. Secrets, home paths and e-mail addresses never
// reach the spec, its YAML or the model. The spec's model is one this server reaches (the transcript's,
// else auto), with a note and a YAML comment saying which and why. The spec always passes validation;
// `origin` says where it came from; notes say what was guessed.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Distilled is the `distilled` object of a distill answer.
type Distilled struct {
	Name           string      `json:"name"`
	Description    string      `json:"description"`
	Persona        string      `json:"persona"`
	Knowledge      []Knowledge `json:"knowledge"`
	Examples       []Example   `json:"examples"`
	SuggestedTools []string    `json:"suggestedTools"`
	SuggestedModel string      `json:"suggestedModel,omitempty"`
	NeedsComputer  bool        `json:"needsComputer"`
	Confidence     float64     `json:"confidence"`
	Notes          []string    `json:"notes"`
	// Read says how much of the transcript a model read (only with useModel).
	Read *DistillRead `json:"read,omitempty"`
}

type distillResult struct {
	Distilled Distilled
	Spec      *AgentSpec
	YAML      string
}

// transcriptToolBundles maps the tools of Claude Code, Codex, Gemini CLI and ChatGPT to agentd's bundles.
var transcriptToolBundles = map[string]string{
	"bash": "computer", "shell": "computer", "run_shell_command": "computer", "local_shell": "computer",
	"exec_command": "computer", "python": "computer", "killshell": "computer", "bashoutput": "computer",
	"read": "files", "write": "files", "edit": "files", "multiedit": "files", "glob": "files", "grep": "files",
	"ls": "files", "notebookedit": "files", "read_file": "files", "write_file": "files", "replace": "files",
	"apply_patch": "files", "list_directory": "files", "glob_tool": "files", "search_file_content": "files",
	"read_many_files": "files", "view_image": "files",
	"webfetch": "web", "websearch": "web", "web_search": "web", "google_web_search": "web", "web_fetch": "web",
	"browser": "web",
}

var sourceModels = map[string]string{"claude-code": "sonnet", "codex": "gpt", "gemini": "gemini", "chatgpt": "gpt"}

// distill runs the three stages; progress (may be nil) hears each.
func (ss *sessionService) distill(ctx context.Context, t *Transcript, useModel bool, model string, progress func(stage string, pct float64)) distillResult {
	step := func(stage string, pct float64) {
		if progress != nil {
			progress(stage, pct)
		}
	}
	step("scanning", 0.1)
	t = ss.redacted(t)
	d := ss.heuristic(t)
	step("extracting", 0.4)
	if useModel {
		if err := ss.modelDistill(ctx, t, model, &d); err != nil {
			d.Notes = append(d.Notes, "the model could not distil this transcript ("+ss.red.redactPersonal(asAPIError(err).Message)+"); the fields come from the free heuristic instead")
		}
	}
	whose := "the " + t.Source + " transcript's"
	if useModel && model != "" {
		whose = "the distill request's"
	}
	var note string
	d.SuggestedModel, note = ss.reachableModel(d.SuggestedModel, t.Source, whose)
	d.Notes = append(d.Notes, note)
	step("merging", 0.8)
	res := ss.specOf(t, d)
	res.YAML = commentTopLevel(res.YAML, "model", ss.red.redactPersonal(note))
	return res
}

// reachableModel is the model a distilled spec names: the transcript's (or the one asked for; whose says
// which) when a provider this server reaches serves it, else auto; and a note saying which and why.
func (ss *sessionService) reachableModel(want, source, whose string) (model, note string) {
	if want == "" || want == "auto" {
		return "auto", fmt.Sprintf("model: auto (the %s transcript names no model): the server picks the best model it reaches", source)
	}
	why := ss.models.unreachable(want)
	if why == "" {
		return want, fmt.Sprintf("model: %s, %s model, which this server reaches", want, whose)
	}
	return "auto", fmt.Sprintf("model: auto, not %s %s: no model provider this server reaches serves it (%s)", whose, want, oneLine(why))
}

// commentTopLevel adds `# comment` at the end of the top-level `key:` line of a rendered spec.
func commentTopLevel(y, key, comment string) string {
	lines := strings.SplitAfter(y, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, key+":") && !strings.Contains(l, "#") && comment != "" {
			lines[i] = strings.TrimRight(l, "\n") + " # " + oneLine(comment) + "\n"
			break
		}
	}
	return strings.Join(lines, "")
}

// redacted is a copy of t with secrets, home paths and e-mail addresses replaced in the title, every text
// and every tool input, before anything is cut or lowercased: a secret cut short or lowercased no longer
// matches its pattern or the environment's value.
func (ss *sessionService) redacted(t *Transcript) *Transcript {
	red := ss.red.redactPersonal
	c := *t
	c.Title = red(t.Title)
	c.Messages = make([]TranscriptMessage, len(t.Messages))
	for i, m := range t.Messages {
		m.Content = red(m.Content)
		if m.ToolInput != nil {
			var v any
			if b, err := json.Marshal(m.ToolInput); err == nil && json.Unmarshal(b, &v) == nil {
				m.ToolInput = redactValue(v, red)
			} else {
				m.ToolInput = nil
			}
		}
		c.Messages[i] = m
	}
	return &c
}

// redactValue applies red to every string (keys too) of a decoded JSON value.
func redactValue(v any, red func(string) string) any {
	switch x := v.(type) {
	case string:
		return red(x)
	case []any:
		for i := range x {
			x[i] = redactValue(x[i], red)
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[red(k)] = redactValue(e, red)
		}
		return out
	}
	return v
}

// heuristic reads what the conversation did.
func (ss *sessionService) heuristic(t *Transcript) Distilled {
	d := Distilled{Knowledge: []Knowledge{}, Examples: []Example{}, SuggestedTools: []string{}, Notes: []string{}}
	var users []string
	tools, commands := map[string]bool{}, []string{}
	for i, m := range t.Messages {
		switch {
		case m.ToolName != "" && m.Role == "assistant":
			key := strings.ToLower(m.ToolName)
			if b := transcriptToolBundles[key]; b != "" {
				tools[b] = true
			} else if strings.Contains(key, "fetch") || strings.Contains(key, "search") {
				tools["web"] = true
			}
			if transcriptToolBundles[key] == "computer" {
				commands = append(commands, fmt.Sprint(m.ToolInput))
			}
		case m.Role == "user":
			users = append(users, m.Content)
			if i+1 < len(t.Messages) && len(d.Examples) < 3 {
				if next := nextAssistantText(t.Messages[i+1:]); next != "" && len(m.Content) < 2000 {
					d.Examples = append(d.Examples, Example{User: clip(m.Content, 600), Assistant: clip(next, 1200)})
				}
			}
		}
	}
	// Tools: the bundles used, in a stable order.
	for _, b := range []string{"computer", "files", "web"} {
		if tools[b] {
			d.SuggestedTools = append(d.SuggestedTools, b)
		}
	}
	d.NeedsComputer = tools["computer"] || tools["files"]
	// Name and description from the task.
	task := titleFrom(t.Messages)
	if t.Title != "" && t.Title != "untitled session" {
		task = t.Title
	}
	d.Name = slugName(task)
	d.Description = clip(oneLine(task), 200)
	// Persona: the task, then instructions the user gave (imperative lines, or lines said twice).
	persona := []string{"You are an agent that does this task again: " + clip(oneLine(firstNonEmpty(firstOf(users), task)), 400) + "."}
	seen, said := map[string]int{}, []string{} // lines by their lowercase form; each first spelling, in order
	for _, u := range users {
		for _, line := range strings.Split(u, "\n") {
			if l := strings.TrimSpace(line); len(l) > 8 && len(l) < 300 {
				if seen[strings.ToLower(l)]++; seen[strings.ToLower(l)] == 2 {
					said = append(said, l)
				}
				if imperative.MatchString(l) && !slices.Contains(persona, l) {
					persona = append(persona, l)
				}
			}
		}
	}
	for _, l := range said {
		persona = append(persona, "The user said more than once: "+l)
	}
	d.Persona = strings.Join(persona[:min(len(persona), 12)], "\n")
	// Knowledge: long pasted reference text.
	for _, u := range users {
		if len(u) > 800 && len(d.Knowledge) < 5 {
			d.Knowledge = append(d.Knowledge, Knowledge{Title: "Reference " + fmt.Sprint(len(d.Knowledge)+1) + ": " + clip(oneLine(u), 60), Content: clip(u, 20000)})
		}
	}
	d.SuggestedModel = sourceModels[t.Source]
	// Confidence: how much the conversation showed.
	d.Confidence = 0.3
	for _, ok := range []bool{len(users) > 0, len(d.SuggestedTools) > 0, len(d.Examples) > 0, len(t.Messages) > 6, len(d.Knowledge) > 0} {
		if ok {
			d.Confidence += 0.1
		}
	}
	d.Notes = append(d.Notes, fmt.Sprintf("distilled without a model from %d messages of a %s transcript", len(t.Messages), t.Source))
	if d.NeedsComputer {
		d.Notes = append(d.Notes, "the conversation ran commands or edited files, so the agent gets a computer; "+flavorNote(commands))
	}
	return d
}

var imperative = regexp.MustCompile(`(?i)^(always|never|don't|do not|make sure|please always|use |prefer |avoid |keep |write |only )`)

func nextAssistantText(rest []TranscriptMessage) string {
	for _, m := range rest {
		if m.Role == "user" {
			return ""
		}
		if m.Role == "assistant" && m.ToolName == "" && strings.TrimSpace(m.Content) != "" {
			return m.Content
		}
	}
	return ""
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// flavorOf suggests a computer flavor from the commands run.
func flavorOf(commands []string) string {
	all := strings.ToLower(strings.Join(commands, "\n"))
	switch {
	case strings.Contains(all, "python") || strings.Contains(all, "pip ") || strings.Contains(all, "pytest") || strings.Contains(all, "uv run"):
		return "python"
	case strings.Contains(all, "npm ") || strings.Contains(all, "node ") || strings.Contains(all, "npx ") || strings.Contains(all, "pnpm"):
		return "node"
	}
	return "base"
}

func flavorNote(commands []string) string {
	return "its commands suggest the " + flavorOf(commands) + " flavor"
}

var nonSlug = regexp.MustCompile(`[^a-z0-9]+`)

// slugName makes a valid agent name from a task.
func slugName(task string) string {
	s := strings.Trim(nonSlug.ReplaceAllString(strings.ToLower(task), "-"), "-")
	words := strings.Split(s, "-")
	if len(words) > 6 {
		words = words[:6]
	}
	s = strings.Trim(strings.Join(words, "-"), "-")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	if s == "" {
		return "distilled-agent"
	}
	return s
}

// modelDistill asks a model to write the fields; what it answers replaces the heuristic's where usable.
func (ss *sessionService) modelDistill(ctx context.Context, t *Transcript, model string, d *Distilled) error {
	if ss.models == nil {
		return errorf(codeModelUnavailable, "no model service")
	}
	asked := model
	model = firstNonEmpty(model, "auto")
	chunks := distillChunks(ss.transcriptLines(t))
	read := &DistillRead{TotalMessages: len(t.Messages), Chunks: len(chunks)}
	for _, c := range chunks {
		read.TotalChars += len(c.text)
	}
	// Every call is counted at its estimate (what the router prices it at before it goes out, an upper
	// bound): a chunk is read only if it and the final call still fit under the ceiling.
	ceiling, committed := ss.costCeiling(), 0.0
	_, finalEst, err := ss.models.EstimateCost(distillFinalRequest(model, strings.Repeat("x", distillNotesChars)))
	if err != nil {
		return err
	}
	call := func(req ChatRequest) (*ChatResponse, error) {
		_, est, _ := ss.models.EstimateCost(req)
		committed += est
		return ss.models.Chat(ctx, req, chatOptions{MaxCostUSD: max(ceiling-committed+est, 0)})
	}
	material := ""
	if len(chunks) == 1 {
		material = chunks[0].text
		read.Messages, read.Chars, read.ChunksRead = chunks[0].messages, len(chunks[0].text), 1
	} else { // a long transcript: the model reads it part by part, keeping notes, then writes from the notes
		notes := ""
		for i, c := range chunks {
			req := distillChunkRequest(model, i, len(chunks), notes, c.text)
			if _, est, err := ss.models.EstimateCost(req); err != nil || committed+est+finalEst > ceiling {
				break
			}
			resp, err := call(req)
			if err != nil {
				if i == 0 {
					return err
				}
				break
			}
			notes = clip(strings.TrimSpace(resp.Text), distillNotesChars)
			read.Messages, read.Chars, read.ChunksRead = read.Messages+c.messages, read.Chars+len(c.text), i+1
		}
		if read.ChunksRead == 0 {
			return errorf(codeBudgetExceeded, "the cost ceiling ($%.4f) does not cover reading this transcript with a model", ceiling).
				withHint("pick a cheaper or local model, distil without useModel, or raise maxCostUsd in config.yaml, " + takesEffect("maxCostUsd"))
		}
		material = fmt.Sprintf("Notes on a conversation too long to show whole, written while reading %d of its %d parts:\n\n%s", read.ChunksRead, len(chunks), notes)
	}
	read.Complete = read.ChunksRead == len(chunks)
	resp, err := call(distillFinalRequest(model, material))
	if err != nil {
		return err
	}
	text := strings.TrimSpace(resp.Text)
	if i, j := strings.Index(text, "{"), strings.LastIndex(text, "}"); i >= 0 && j > i {
		text = text[i : j+1]
	}
	var got struct {
		Name, Description, Persona string
		Knowledge                  []Knowledge
		Examples                   []Example
	}
	if err := json.Unmarshal([]byte(text), &got); err != nil || strings.TrimSpace(got.Persona) == "" {
		return errorf(codeModelError, "the model's answer was not the JSON object asked for")
	}
	if n := slugName(got.Name); got.Name != "" && n != "distilled-agent" {
		d.Name = n
	}
	d.Description = firstNonEmpty(clip(oneLine(got.Description), 200), d.Description)
	d.Persona = got.Persona
	if len(got.Knowledge) > 0 {
		d.Knowledge = got.Knowledge[:min(len(got.Knowledge), 8)]
	}
	if len(got.Examples) > 0 {
		d.Examples = got.Examples[:min(len(got.Examples), 5)]
	}
	d.SuggestedModel = firstNonEmpty(asked, d.SuggestedModel)
	d.Confidence = min(d.Confidence+0.2, 0.95)
	d.Read = read
	d.Notes = append(d.Notes, "the name, description, persona, knowledge and examples were written by "+resp.Model)
	if read.Complete {
		d.Notes = append(d.Notes, fmt.Sprintf("the model read the whole transcript: %d messages, %d characters, in %d part(s)", read.Messages, read.Chars, read.Chunks))
	} else {
		d.Notes = append(d.Notes, fmt.Sprintf("the model read %d of %d messages (%d of %d characters, %d of %d parts) before the cost ceiling of $%.4f; the rest was not read",
			read.Messages, read.TotalMessages, read.Chars, read.TotalChars, read.ChunksRead, read.Chunks, ceiling))
	}
	return nil
}

// DistillRead says how much of a transcript the model read (distilled.read, with useModel).
type DistillRead struct {
	Messages      int  `json:"messages"`
	TotalMessages int  `json:"totalMessages"`
	Chars         int  `json:"chars"`
	TotalChars    int  `json:"totalChars"`
	ChunksRead    int  `json:"chunksRead"`
	Chunks        int  `json:"chunks"`
	Complete      bool `json:"complete"`
}

const (
	distillChunkChars = 60_000 // characters of transcript per model call
	distillNotesChars = 8_000  // the notes carried from part to part
)

// transcriptLines are the messages as the model reads them: one line each (a tool call by its name and
// input), redacted, each at most 1,500 characters.
func (ss *sessionService) transcriptLines(t *Transcript) []string {
	lines := make([]string, 0, len(t.Messages))
	for _, m := range t.Messages {
		line := m.Role + ": " + m.Content
		if m.ToolName != "" {
			in, _ := json.Marshal(m.ToolInput)
			line = m.Role + " called " + m.ToolName + " " + clip(string(in), 300)
		}
		lines = append(lines, clip(ss.red.redactPersonal(line), 1500)+"\n")
	}
	return lines
}

type distillChunk struct {
	text     string
	messages int
}

// distillChunks cuts the lines into parts of at most distillChunkChars (a part holds at least one line).
func distillChunks(lines []string) []distillChunk {
	var out []distillChunk
	var b strings.Builder
	n := 0
	for _, l := range lines {
		if b.Len() > 0 && b.Len()+len(l) > distillChunkChars {
			out = append(out, distillChunk{b.String(), n})
			b.Reset()
			n = 0
		}
		b.WriteString(l)
		n++
	}
	if b.Len() > 0 || len(out) == 0 {
		out = append(out, distillChunk{b.String(), n})
	}
	return out
}

func distillFinalRequest(model, material string) ChatRequest {
	return ChatRequest{Model: model, System: distillPrompt, MaxTokens: 2000, Messages: []ModelMessage{textMessage("user", material)}}
}

func distillChunkRequest(model string, i, n int, notes, text string) ChatRequest {
	user := fmt.Sprintf("Part %d of %d.\n\nYour notes so far:\n%s\n\nThe part:\n%s", i+1, n, firstNonEmpty(notes, "(none yet)"), text)
	return ChatRequest{Model: model, System: distillChunkPrompt, MaxTokens: 2500, Messages: []ModelMessage{textMessage("user", user)}}
}

const distillChunkPrompt = `You are reading a long conversation between a person and an AI assistant, one part at a time, to define later an agent that can do the same task again. You get your notes so far and the next part. Answer with the updated notes only, at most 6,000 characters: the task and its goal, the user's standing instructions and preferences, the steps and commands that worked, facts and reference material the agent will need, and one or two short example exchanges. Never include secrets, personal names, e-mail addresses or home directory paths.`

const distillPrompt = `You turn a conversation between a person and an AI assistant into the definition of an agent that can do the same task again on its own. Answer with one JSON object and nothing else: {"name": "lowercase-dashed-name", "description": "one sentence", "persona": "the system prompt: what the agent does, how, and the user's standing instructions", "knowledge": [{"title": "...", "content": "reference text the agent needs"}], "examples": [{"user": "...", "assistant": "..."}]}. Never include secrets, personal names, e-mail addresses or home directory paths.`

// specOf builds the spec from the distilled fields, redacted, and makes sure it validates.
func (ss *sessionService) specOf(t *Transcript, d Distilled) distillResult {
	red := ss.red.redactPersonal
	d.Name = slugName(red(d.Name))
	d.Description = clip(red(d.Description), 280)
	d.Persona = red(d.Persona)
	for i := range d.Knowledge {
		d.Knowledge[i] = Knowledge{Title: red(firstNonEmpty(d.Knowledge[i].Title, "Reference")), Content: red(d.Knowledge[i].Content)}
	}
	for i := range d.Examples {
		d.Examples[i] = Example{User: red(d.Examples[i].User), Assistant: red(d.Examples[i].Assistant)}
	}
	for i := range d.Notes {
		d.Notes[i] = red(d.Notes[i])
	}
	d.Confidence = min(max(d.Confidence, 0), 1)
	importedAt, _ := t.Meta["importedAt"].(string)
	spec := defaultSpec()
	spec.Name, spec.Description, spec.Persona = d.Name, d.Description, d.Persona
	spec.Knowledge, spec.Examples = d.Knowledge, d.Examples
	spec.Tools = append([]string{}, d.SuggestedTools...)
	if d.SuggestedModel != "" {
		spec.Model = d.SuggestedModel
	}
	enabled := d.NeedsComputer
	spec.Computer.Enabled = &enabled
	if d.NeedsComputer {
		var cmds []string
		for _, m := range t.Messages {
			if transcriptToolBundles[strings.ToLower(m.ToolName)] == "computer" {
				cmds = append(cmds, fmt.Sprint(m.ToolInput))
			}
		}
		spec.Computer.Flavor = flavorOf(cmds)
	}
	count := len(t.Messages)
	spec.Origin = &Origin{Source: t.Source, TranscriptID: t.ID, MessageCount: &count, ImportedAt: importedAt}
	// Through the one validator: the answer is a spec POST /v1/agents accepts.
	b, _ := json.Marshal(spec)
	parsed, issues := parseSpecJSON(b)
	if len(issues) > 0 || parsed == nil {
		d.Notes = append(d.Notes, "the distilled spec did not validate ("+strings.Join(issues, "; ")+"); a minimal spec is returned")
		parsed, _ = parseSpecJSON([]byte(`{"name":"distilled-agent"}`))
	}
	return distillResult{Distilled: d, Spec: parsed, YAML: renderSpecYAML(parsed)}
}
