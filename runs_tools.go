// runs_tools.go — the tools a run offers the model: their JSON schemas, argument decoding, and the
// computer and files tools.
//
// Entry points: toolCatalog (every tool, by name), resolveTools (a spec's `tools` list → the names this run
// offers), toolArgs (a call's arguments → a struct). Bundles (docs/API.md tools table): computer = shell,
// expose_port, computer_info; files = read_file, write_file, edit_file, list_dir, search_files, move,
// delete; web = fetch_url (+ web_search when BRAVE_API_KEY or TAVILY_API_KEY is set); http = http_request (opt-in). The web
// and http tools live in runs_tools_web.go, computer_info in runs_tools_info.go; browser = browse and
// the browser_* tools (opt-in; computers_browser_tools.go).
// Rules: tools needing a machine are dropped when computer.enabled is false; unknown names are dropped;
// every exec goes through the agent's command policy; every file path goes through the computer's jail;
// the network tools obey the network policy (runs_tools_web.go). A tool failure is an error result for
// the model, never the end of the run — except that a run whose computer cannot be created or started
// ends `error` (runs_loop.go); failures of the platform (not of the command) are logged with the run, the
// tool and the code.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// toolImpl is one tool: what the model sees and what runs.
type toolImpl struct {
	def           ToolDef
	needsComputer bool
	streams       bool // emits tool_delta
	run           func(ctx context.Context, env *toolEnv, args map[string]any) (string, error)
}

// toolEnv is what a tool may use: its run (computer, limits, policy) and its delta stream.
type toolEnv struct {
	ar    *activeRun
	call  ToolCall
	delta func(stream, text string)
	seen  bool // a human approved this very call in ask mode (commandPolicy.Seen)
}

func (e *toolEnv) computer(ctx context.Context) (string, error) { return e.ar.computer(ctx) }

// jailed puts a path through the jail, then gets the run's computer: how every file tool starts.
func (e *toolEnv) jailed(ctx context.Context, p string) (id, jailedPath string, err error) {
	if jailedPath, err = lexicalJail(p); err != nil {
		return "", "", err
	}
	id, err = e.computer(ctx)
	return id, jailedPath, err
}

func isBinary(b []byte) bool { return bytes.IndexByte(b[:min(len(b), 8192)], 0) >= 0 }

func (e *toolEnv) policy() commandPolicy {
	p := e.ar.spec.Guardrails.policy()
	p.Seen = e.seen
	return p
}

var toolBundles = map[string][]string{
	"computer": {"shell", "expose_port", "computer_info"},
	"files":    {"read_file", "write_file", "edit_file", "list_dir", "search_files", "move", "delete"},
	"web":      {"fetch_url", "web_search"},
	"http":     {"http_request"},
	"browser": {"browse", "browser_goto", "browser_snapshot", "browser_click", "browser_type", "browser_screenshot",
		"browser_wait_for", "browser_scroll", "browser_select", "browser_hover", "browser_navigate", "browser_tabs", "browser_status"},
}

// resolveTools expands bundles and drops what cannot work for this spec, keeping the spec's order.
func resolveTools(spec *AgentSpec, getenv func(string) string) []string {
	names := spec.Tools
	if names == nil {
		names = []string{"computer"}
	}
	catalog := toolCatalog()
	var out []string
	add := func(n string) {
		t, ok := catalog[n]
		if !ok || slices.Contains(out, n) {
			return
		}
		if t.needsComputer && !spec.Computer.IsEnabled() {
			return
		}
		if n == "web_search" && len(searchProviders(getenv)) == 0 {
			return
		}
		out = append(out, n)
	}
	for _, n := range names {
		if b, ok := toolBundles[n]; ok {
			for _, m := range b {
				add(m)
			}
			continue
		}
		add(n)
	}
	return out
}

func obj(required []string, props map[string]any) map[string]any {
	if required == nil {
		required = []string{}
	}
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

func prop(typ, desc string) map[string]any { return map[string]any{"type": typ, "description": desc} }

// toolCatalog returns every tool agentd knows (the browser's: computers_browser_tools.go).
func toolCatalog() map[string]toolImpl {
	tools := map[string]toolImpl{
		"shell": {needsComputer: true, streams: true, run: toolShell, def: ToolDef{Name: "shell",
			Description: "Run a shell command (sh -c) on the agent's computer and return its exit code and output. The working directory is /work unless cwd is given. No state persists between calls except files.",
			Parameters: obj([]string{"command"}, map[string]any{
				"command":    prop("string", "the command line, run under /bin/sh -c"),
				"cwd":        prop("string", "working directory (under /work or /tmp)"),
				"stdin":      prop("string", "text given to the command on its standard input (closed after it)"),
				"timeoutSec": map[string]any{"type": "integer", "minimum": 1, "maximum": 3600, "description": "time limit; at most the agent's execTimeoutSec"},
			})}},
		"expose_port": {needsComputer: true, run: toolExposePort, def: ToolDef{Name: "expose_port",
			Description: "Make a TCP port of the computer reachable from the host and return its URL.",
			Parameters:  obj([]string{"port"}, map[string]any{"port": map[string]any{"type": "integer", "minimum": 1, "maximum": 65535}})}},
		"computer_info": {needsComputer: true, run: toolComputerInfo, def: ToolDef{Name: "computer_info",
			Description: "Describe the agent's computer: its record (id, provider, image, working directory, exposed ports) and what a probe inside it finds: os, kernel, arch, user, cpus, memory, free disk, and which common tools (git, curl, jq, rg, python3, node, go, cargo, make, gcc) are installed.",
			Parameters:  obj(nil, map[string]any{})}},
		"read_file": {needsComputer: true, run: toolReadFile, def: ToolDef{Name: "read_file",
			Description: "Read a text file from the computer, optionally a range of lines (1-based, inclusive). Lines are prefixed with their numbers.",
			Parameters: obj([]string{"path"}, map[string]any{
				"path":       prop("string", "file path under /work or /tmp (relative paths are under /work)"),
				"start_line": map[string]any{"type": "integer", "minimum": 1},
				"end_line":   map[string]any{"type": "integer", "minimum": 1},
				"startLine":  map[string]any{"type": "integer", "minimum": 1, "description": "same as start_line"},
				"endLine":    map[string]any{"type": "integer", "minimum": 1, "description": "same as end_line"},
				"maxBytes":   map[string]any{"type": "integer", "minimum": 1, "description": "stop the output after this many bytes (whole lines); the result says where to go on"},
			})}},
		"write_file": {needsComputer: true, run: toolWriteFile, def: ToolDef{Name: "write_file",
			Description: "Create or overwrite a file on the computer with the given content, or append to it.",
			Parameters: obj([]string{"path", "content"}, map[string]any{"path": prop("string", "file path"),
				"content": prop("string", "the whole new content (with append: the text to add at the end)"),
				"append":  prop("boolean", "add content at the end of the file (created when absent) instead of replacing it"),
				"mode":    prop("string", `permission bits in octal, such as "0755" for a script or "0600" for a secret (at most 0777)`),
			})}},
		"edit_file": {needsComputer: true, run: toolEditFile, def: ToolDef{Name: "edit_file",
			Description: "Replace an exact piece of text in a file. old_string must match exactly once unless replace_all is true; include surrounding lines to make it unique.",
			Parameters: obj([]string{"path", "old_string", "new_string"}, map[string]any{
				"path": prop("string", "file path"), "old_string": prop("string", "exact text to find"),
				"new_string": prop("string", "replacement text"), "replace_all": prop("boolean", "replace every occurrence"),
			})}},
		"list_dir": {needsComputer: true, run: toolListDir, def: ToolDef{Name: "list_dir",
			Description: "List a directory on the computer (directories first), optionally recursively (bounded).",
			Parameters: obj(nil, map[string]any{
				"path": prop("string", "directory (default /work)"), "recursive": prop("boolean", "descend into sub-directories"),
				"max_entries": map[string]any{"type": "integer", "minimum": 1, "maximum": 2000},
			})}},
		"search_files": {needsComputer: true, run: toolSearchFiles, def: ToolDef{Name: "search_files",
			Description: "Search file contents under a directory with a regular expression; returns path:line:text matches.",
			Parameters: obj([]string{"pattern"}, map[string]any{
				"pattern": prop("string", "regular expression"), "path": prop("string", "directory (default /work)"),
				"glob":        prop("string", `only files whose name matches this glob, such as "*.go" (a glob with a / matches the path under the directory)`),
				"ignoreCase":  prop("boolean", "match letters of either case"),
				"max_results": map[string]any{"type": "integer", "minimum": 1, "maximum": 1000},
			})}},
		"move": {needsComputer: true, run: toolMove, def: ToolDef{Name: "move",
			Description: "Move or rename a file or directory on the computer.",
			Parameters:  obj([]string{"from", "to"}, map[string]any{"from": prop("string", "source path"), "to": prop("string", "destination path")})}},
		"delete": {needsComputer: true, run: toolDelete, def: ToolDef{Name: "delete",
			Description: "Delete a file, or a directory with recursive true.",
			Parameters:  obj([]string{"path"}, map[string]any{"path": prop("string", "path to delete"), "recursive": prop("boolean", "delete a directory and its content")})}},
		"fetch_url": {run: toolFetchURL, def: ToolDef{Name: "fetch_url",
			Description: "Fetch a web page or document over http(s) and return it as text (HTML is converted to text).",
			Parameters: obj([]string{"url"}, map[string]any{"url": prop("string", "http or https URL"),
				"maxBytes": map[string]any{"type": "integer", "minimum": 1, "maximum": fetchMaxBytes, "description": "return at most this many bytes of the text"}})}},
		"web_search": {run: toolWebSearch, def: ToolDef{Name: "web_search",
			Description: "Search the web and return titles, URLs and snippets.",
			Parameters: obj([]string{"query"}, map[string]any{"query": prop("string", "search terms"),
				"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 20, "description": "how many results (default 8)"},
				"count": map[string]any{"type": "integer", "minimum": 1, "maximum": 20, "description": "same as limit"}})}},
		"http_request": {run: toolHTTPRequest, def: ToolDef{Name: "http_request",
			Description: "Make an HTTP request and return the status, headers and body.",
			Parameters: obj([]string{"url"}, map[string]any{
				"method": map[string]any{"type": "string", "enum": []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}},
				"url":    prop("string", "http or https URL"), "body": prop("string", "request body"),
				"headers":  map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
				"maxBytes": map[string]any{"type": "integer", "minimum": 1, "maximum": fetchMaxBytes, "description": "return at most this many bytes of the body"},
			})}},
	}
	for name, t := range browserTools() {
		tools[name] = t
	}
	return tools
}

// ---- argument helpers ----

func argError(format string, a ...any) error { return errorf(codeToolError, format, a...) }

// toolArgs decodes a tool call's arguments into the fields of the struct *v by their `arg` tags ("name"
// or "name,required"; "name|alias" takes the first of the names present). An absent argument leaves its field as set by the caller (the default). Models
// are loose with types, so integers may come quoted and booleans as "true"; any other mismatch, or a
// missing required argument, is E_TOOL_ERROR naming the argument.
func toolArgs(args map[string]any, v any) error {
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		names, opt, _ := strings.Cut(rv.Type().Field(i).Tag.Get("arg"), ",")
		var raw any
		ok := false
		name := names
		for _, n := range strings.Split(names, "|") {
			if raw, ok = args[n]; ok && raw != nil {
				name = n
				break
			}
		}
		if !ok || raw == nil {
			if opt == "required" {
				return argError("missing required argument %q", name)
			}
			continue
		}
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.String:
			s, ok := raw.(string)
			if !ok {
				return argError("argument %q must be a string", name)
			}
			f.SetString(s)
		case reflect.Int:
			n, ok := argInt(raw)
			if !ok {
				return argError("argument %q must be an integer", name)
			}
			f.SetInt(int64(n))
		case reflect.Bool:
			switch b := raw.(type) {
			case bool:
				f.SetBool(b)
			case string:
				f.SetBool(b == "true")
			default:
				return argError("argument %q must be a boolean", name)
			}
		case reflect.Map: // an object of strings (headers); anything else is ignored, as models send junk here
			if m, ok := raw.(map[string]any); ok {
				f.Set(reflect.ValueOf(m))
			}
		}
	}
	return nil
}

func argInt(v any) (int, bool) {
	switch n := v.(type) {
	case float64:
		return int(n), n == float64(int(n))
	case json.Number:
		i, err := n.Int64()
		return int(i), err == nil
	case int:
		return n, true
	case string: // some models quote numbers
		var i int
		_, err := fmt.Sscanf(n, "%d", &i)
		return i, err == nil
	}
	return 0, false
}

// ---- computer bundle ----

func toolShell(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	lim := env.ar.lim
	a := struct {
		Command string `arg:"command,required"`
		Cwd     string `arg:"cwd"`
		Stdin   string `arg:"stdin"`
		Timeout int    `arg:"timeoutSec"`
	}{Timeout: lim.ExecTimeoutSec}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	if strings.TrimSpace(a.Command) == "" {
		return "", argError("command is empty")
	}
	if a.Cwd != "" {
		var err error
		if a.Cwd, err = lexicalJail(a.Cwd); err != nil {
			return "", err
		}
	}
	timeout := min(max(a.Timeout, 1), lim.ExecTimeoutSec, 3600)
	pol := env.policy()
	if ae := pol.check(a.Command); ae != nil {
		return "", ae
	}
	id, err := env.computer(ctx)
	if err != nil {
		return "", err
	}
	req := ExecRequest{Cmd: execCommand{Shell: a.Command}, Cwd: a.Cwd, TimeoutSec: timeout,
		MaxOutputBytes: min(lim.MaxOutputBytes, 16<<20), Policy: pol}
	if _, given := args["stdin"]; given {
		req.Stdin = &a.Stdin
	}
	res, err := env.ar.rs.computers.Exec(ctx, id, req, env.delta)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for i, s := range []string{res.Stdout, res.Stderr} {
		if s == "" {
			continue
		}
		if i == 1 {
			b.WriteString("[stderr]\n")
		}
		b.WriteString(s)
		if !strings.HasSuffix(s, "\n") {
			b.WriteByte('\n')
		}
	}
	fmt.Fprintf(&b, "[exit code %d", res.ExitCode)
	if res.TimedOut {
		fmt.Fprintf(&b, "; timed out after %d s", timeout)
	}
	if res.Truncated {
		b.WriteString("; output truncated")
	}
	b.WriteString("]")
	return b.String(), nil
}

func toolExposePort(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		Port int `arg:"port"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	if a.Port < 1 || a.Port > 65535 {
		return "", argError("port must be between 1 and 65535")
	}
	id, err := env.computer(ctx)
	if err != nil {
		return "", err
	}
	pb, err := env.ar.rs.computers.ExposePort(ctx, id, a.Port)
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(pb)
	return string(b), nil
}

// ---- files bundle ----

func toolReadFile(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	a := struct {
		Path     string `arg:"path,required"`
		Start    int    `arg:"start_line|startLine"`
		End      int    `arg:"end_line|endLine"`
		MaxBytes int    `arg:"maxBytes"`
	}{Start: 1}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	id, p, err := env.jailed(ctx, a.Path)
	if err != nil {
		return "", err
	}
	start, end := a.Start, a.End
	data, err := env.ar.rs.computers.ReadFile(ctx, id, p)
	if err != nil {
		return "", err
	}
	if isBinary(data) {
		return fmt.Sprintf("%s is a binary file of %d bytes; not shown", p, len(data)), nil
	}
	lines := strings.SplitAfter(string(data), "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	total := len(lines)
	if start < 1 {
		start = 1
	}
	if end <= 0 || end > total {
		end = total
	}
	if total == 0 {
		return fmt.Sprintf("%s is empty", p), nil
	}
	if start > total {
		return "", argError("start_line %d is past the end of %s (%d lines)", start, p, total)
	}
	if end < start {
		return "", argError("end_line %d is before start_line %d", end, start)
	}
	var b strings.Builder
	if start != 1 || end != total {
		fmt.Fprintf(&b, "[lines %d-%d of %d]\n", start, end, total)
	}
	for i := start; i <= end; i++ {
		line := fmt.Sprintf("%6d\t%s", i, lines[i-1])
		if !strings.HasSuffix(line, "\n") {
			line += "\n"
		}
		if a.MaxBytes > 0 && b.Len()+len(line) > a.MaxBytes && i > start {
			fmt.Fprintf(&b, "[stopped before line %d: maxBytes %d reached; read on with startLine %d]\n", i, a.MaxBytes, i)
			break
		}
		b.WriteString(line)
	}
	return b.String(), nil
}

func toolWriteFile(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		Path    string `arg:"path,required"`
		Content string `arg:"content,required"`
		Append  bool   `arg:"append"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	mode, hasMode, err := fileModeArg(args["mode"])
	if err != nil {
		return "", err
	}
	id, p, err := env.jailed(ctx, a.Path)
	if err != nil {
		return "", err
	}
	c := env.ar.rs.computers
	chmod := []string{"chmod", fmt.Sprintf("%04o", mode), "--"}
	if hasMode { // refused by the command policy before anything is written
		if ae := env.policy().check(strings.Join(append(chmod, path.Base(p)), " ")); ae != nil {
			return "", ae
		}
	}
	data, verb := []byte(a.Content), "wrote"
	if a.Append {
		old, err := c.ReadFile(ctx, id, p)
		if err != nil && fileExists(ctx, c, id, p) {
			return "", err
		}
		data, verb = append(old, data...), "appended"
	}
	if err := c.WriteFile(ctx, id, p, data); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("%s %d bytes to %s", verb, len(a.Content), p)
	if !hasMode {
		return msg, nil
	}
	// chmod runs in the machine on the path the jail resolved, through the command policy.
	full, err := c.Resolve(ctx, id, p, false)
	if err != nil {
		return "", err
	}
	root, rel := splitRoot(full)
	res, err := c.Exec(ctx, id, ExecRequest{Cmd: execCommand{Argv: append(chmod, rel)}, Cwd: root,
		TimeoutSec: min(env.ar.lim.ExecTimeoutSec, 60), Policy: env.policy()}, nil)
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", argError("%s; chmod failed: %s", msg, strings.TrimSpace(res.Stderr))
	}
	return fmt.Sprintf("%s (mode %04o)", msg, mode), nil
}

// fileModeArg reads write_file's mode: octal digits as a string ("0755", "755", "0o755") or as a number
// whose decimal digits are the octal ones (models write 755). Permission bits only: at most 0777.
func fileModeArg(v any) (mode uint32, given bool, err error) {
	var s string
	switch m := v.(type) {
	case nil:
		return 0, false, nil
	case string:
		s = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(m), "0o"), "0O")
	default:
		n, ok := argInt(v)
		if !ok || n < 0 {
			return 0, false, argError("mode must be octal permission bits such as \"0755\"")
		}
		s = fmt.Sprint(n)
	}
	var n uint64
	if len(s) == 0 || len(s) > 4 || strings.Trim(s, "01234567") != "" {
		return 0, false, argError("mode %v is not octal permission bits such as \"0755\"", v)
	}
	fmt.Sscanf(s, "%o", &n)
	if n > 0o777 {
		return 0, false, argError("mode %v sets more than the permission bits (at most 0777)", v)
	}
	return uint32(n), true, nil
}

// fileExists reports whether p names an entry of its directory: append treats a read error on an absent
// file (or one in an absent directory) as an empty file.
func fileExists(ctx context.Context, c runComputers, id, p string) bool {
	ents, err := c.ListDir(ctx, id, path.Dir(p))
	return err == nil && slices.ContainsFunc(ents, func(e DirEntry) bool { return e.Name == path.Base(p) })
}

func toolEditFile(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		Path string `arg:"path,required"`
		Old  string `arg:"old_string,required"`
		New  string `arg:"new_string,required"`
		All  bool   `arg:"replace_all"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	if a.Old == "" {
		return "", argError("old_string is empty; to create or overwrite a file use write_file")
	}
	id, p, err := env.jailed(ctx, a.Path)
	if err != nil {
		return "", err
	}
	data, err := env.ar.rs.computers.ReadFile(ctx, id, p)
	if err != nil {
		return "", err
	}
	text := string(data)
	n := strings.Count(text, a.Old)
	switch {
	case n == 0:
		return "", argError("old_string was not found in %s; read the file and copy the text exactly, including whitespace", p)
	case n > 1 && !a.All:
		return "", argError("old_string matches %d places in %s; include more surrounding lines to make it unique, or set replace_all", n, p)
	}
	text = strings.Replace(text, a.Old, a.New, n) // n is 1 unless replace_all
	if err := env.ar.rs.computers.WriteFile(ctx, id, p, []byte(text)); err != nil {
		return "", err
	}
	return fmt.Sprintf("replaced %d occurrence(s) in %s", n, p), nil
}

func toolListDir(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	a := struct {
		Path      string `arg:"path"`
		Recursive bool   `arg:"recursive"`
		Max       int    `arg:"max_entries"`
	}{Max: 500}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	id, p, err := env.jailed(ctx, a.Path)
	if err != nil {
		return "", err
	}
	maxN := min(max(a.Max, 1), 2000)
	var b strings.Builder
	count, truncated := 0, false
	queue := []string{p}
	for len(queue) > 0 && !truncated {
		dir := queue[0]
		queue = queue[1:]
		entries, err := env.ar.rs.computers.ListDir(ctx, id, dir)
		if err != nil {
			if dir == p {
				return "", err
			}
			fmt.Fprintf(&b, "%s/ (unreadable: %v)\n", dir, err)
			continue
		}
		for _, e := range entries {
			if count >= maxN {
				truncated = true
				break
			}
			count++
			full := e.Path
			if full == "" {
				full = path.Join(dir, e.Name)
			}
			switch e.Type {
			case "dir":
				fmt.Fprintf(&b, "%s/\n", full)
				if a.Recursive && e.Name != ".git" && e.Name != "node_modules" {
					queue = append(queue, full)
				}
			case "symlink":
				fmt.Fprintf(&b, "%s@\n", full)
			default:
				fmt.Fprintf(&b, "%s (%d bytes)\n", full, e.Size)
			}
		}
	}
	if count == 0 {
		return p + " is empty", nil
	}
	if truncated {
		fmt.Fprintf(&b, "[listing stopped at %d entries; list a sub-directory for more]\n", maxN)
	}
	return b.String(), nil
}

// searchScript: $1 pattern, $2 directory, $3 most matches, $4 glob (may be empty), $5 the case flag.
const searchScript = `if command -v rg >/dev/null 2>&1; then rg --line-number --no-heading --color never --max-columns 300 "$5" ${4:+"--glob=$4"} -e "$1" -- "$2" 2>/dev/null | head -n "$3"; else echo __AGENTD_NO_RG__; fi`

// searchOpts bound and narrow a search: at most max matches, in files whose name matches glob.
type searchOpts struct {
	max  int
	glob string
}

// globMatch: a glob without a slash matches a file's name, one with a slash its path under the root.
func (o searchOpts) globMatch(root, full string) bool {
	if o.glob == "" {
		return true
	}
	if strings.Contains(o.glob, "/") {
		ok, _ := path.Match(o.glob, strings.TrimPrefix(strings.TrimPrefix(full, root), "/"))
		return ok
	}
	ok, _ := path.Match(o.glob, path.Base(full))
	return ok
}

func toolSearchFiles(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	a := struct {
		Pattern    string `arg:"pattern,required"`
		Path       string `arg:"path"`
		Glob       string `arg:"glob"`
		IgnoreCase bool   `arg:"ignoreCase"`
		Max        int    `arg:"max_results"`
	}{Max: 200}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	expr, caseFlag := a.Pattern, "--case-sensitive"
	if a.IgnoreCase {
		expr, caseFlag = "(?i)"+expr, "--ignore-case"
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return "", argError("pattern is not a valid regular expression: %v", err)
	}
	if _, err := path.Match(a.Glob, ""); err != nil || strings.HasPrefix(a.Glob, "-") {
		return "", argError("glob %q is not a valid pattern", a.Glob)
	}
	id, p, err := env.jailed(ctx, a.Path)
	if err != nil {
		return "", err
	}
	maxN := min(max(a.Max, 1), 1000)
	// rg is given the resolved path: a symlink named as the search root must not lead it outside.
	if p, err = env.ar.rs.computers.Resolve(ctx, id, p, false); err != nil {
		return "", err
	}
	root, rel := splitRoot(p)
	res, err := env.ar.rs.computers.Exec(ctx, id, ExecRequest{
		Cmd: execCommand{Argv: []string{"/bin/sh", "-c", searchScript, "sh", a.Pattern, rel, fmt.Sprint(maxN), a.Glob, caseFlag}},
		Cwd: root, TimeoutSec: min(env.ar.lim.ExecTimeoutSec, 60), MaxOutputBytes: 1 << 20, Policy: env.policy(),
	}, nil)
	if err == nil && !strings.Contains(res.Stdout, "__AGENTD_NO_RG__") && res.ExitCode == 0 {
		out := strings.TrimRight(res.Stdout, "\n")
		if out == "" {
			return "no matches", nil
		}
		// rg prints paths relative to the cwd; show them as machine paths.
		var b strings.Builder
		for _, line := range strings.Split(out, "\n") {
			if !strings.HasPrefix(line, "/") {
				line = root + "/" + strings.TrimPrefix(line, "./")
			}
			b.WriteString(line + "\n")
		}
		return b.String(), nil
	}
	return walkSearch(ctx, env, id, p, re, searchOpts{max: maxN, glob: a.Glob})
}

// walkSearch is the fallback when ripgrep is absent: a bounded walk through the jailed file API.
func walkSearch(ctx context.Context, env *toolEnv, id, root string, re *regexp.Regexp, o searchOpts) (string, error) {
	maxN := o.max
	const maxFiles, maxFileBytes = 2000, 1 << 20
	c := env.ar.rs.computers
	var b strings.Builder
	matches, files := 0, 0
	queue := []string{root}
	for len(queue) > 0 && matches < maxN && files < maxFiles {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		dir := queue[0]
		queue = queue[1:]
		entries, err := c.ListDir(ctx, id, dir)
		if err != nil {
			if dir == root {
				return "", err
			}
			continue
		}
		sort.SliceStable(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
		for _, e := range entries {
			full := e.Path
			if full == "" {
				full = path.Join(dir, e.Name)
			}
			if e.Type == "dir" {
				if e.Name != ".git" && e.Name != "node_modules" {
					queue = append(queue, full)
				}
				continue
			}
			if e.Type != "file" || e.Size > maxFileBytes || files >= maxFiles || !o.globMatch(root, full) {
				continue
			}
			files++
			data, err := c.ReadFile(ctx, id, full)
			if err != nil || isBinary(data) {
				continue
			}
			for i, line := range strings.Split(string(data), "\n") {
				if re.MatchString(line) {
					if len(line) > 300 {
						line = line[:300]
					}
					fmt.Fprintf(&b, "%s:%d:%s\n", full, i+1, line)
					if matches++; matches >= maxN {
						break
					}
				}
			}
			if matches >= maxN {
				break
			}
		}
	}
	if matches == 0 {
		return "no matches", nil
	}
	return b.String(), nil
}

func toolMove(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		From string `arg:"from,required"`
		To   string `arg:"to,required"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	from, err := lexicalJail(a.From)
	if err != nil {
		return "", err
	}
	to, err := lexicalJail(a.To)
	if err != nil {
		return "", err
	}
	if from == "/work" || from == "/tmp" {
		return "", errorf(codeFSDenied, "refusing to move the workspace root")
	}
	id, err := env.computer(ctx)
	if err != nil {
		return "", err
	}
	c := env.ar.rs.computers
	// A file moves through the jailed file API; a directory through mv inside the machine.
	if data, rerr := c.ReadFile(ctx, id, from); rerr == nil {
		if err := c.WriteFile(ctx, id, to, data); err != nil {
			return "", err
		}
		if err := c.DeletePath(ctx, id, from, false); err != nil {
			return "", err
		}
		return fmt.Sprintf("moved %s to %s", from, to), nil
	}
	if _, lerr := c.ListDir(ctx, id, from); lerr != nil {
		return "", lerr
	}
	// mv follows a destination that is (or links to) a directory. Both ends go through the jail: an
	// existing directory destination is resolved and the move goes into it, then mv -T renames onto the
	// checked path itself, so a symlink planted as the destination is replaced, never followed outside.
	full, err := c.Resolve(ctx, id, to, false)
	if err != nil {
		return "", err
	}
	if _, lerr := c.ListDir(ctx, id, full); lerr == nil {
		to = joinGuest(full, path.Base(from))
	}
	src, err := c.Resolve(ctx, id, from, true)
	if err != nil {
		return "", err
	}
	dst, err := c.Resolve(ctx, id, to, true)
	if err != nil {
		return "", err
	}
	fr, frel := splitRoot(src)
	tr, trel := splitRoot(dst)
	if fr != tr {
		return "", argError("a directory cannot be moved between /work and /tmp")
	}
	res, err := c.Exec(ctx, id, ExecRequest{Cmd: execCommand{Argv: []string{"mv", "-T", "--", frel, trel}}, Cwd: fr,
		TimeoutSec: min(env.ar.lim.ExecTimeoutSec, 120), Policy: env.policy()}, nil)
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", argError("mv failed: %s", strings.TrimSpace(res.Stderr))
	}
	return fmt.Sprintf("moved %s to %s", from, to), nil
}

func toolDelete(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		Path      string `arg:"path,required"`
		Recursive bool   `arg:"recursive"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	id, p, err := env.jailed(ctx, a.Path)
	if err != nil {
		return "", err
	}
	if err := env.ar.rs.computers.DeletePath(ctx, id, p, a.Recursive); err != nil {
		return "", err
	}
	return "deleted " + p, nil
}
