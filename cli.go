// cli.go — the command line: the command table, help and usage, the /v1 client every client command
// shares, errors and exit codes, and the output helpers (tables, relative times, colour, --json).
//
// Entry points: run (main.go) hands every command that is not serve/validate/version to runCLI. Each
// command is one row of cliCommands: its name, its arguments, a one-line summary, an example, and the
// function that runs it (cli_agents.go, cli_computers.go, cli_shell.go). `CMD --help` runs the command in
// help mode: its first c.flags prints the usage with one line per flag it defines, documented in
// cliFlagDocs (issue 26). An unknown command or flag is one line naming the nearest one; server hints
// that name a /v1 route are rewritten to the CLI command (cliHint).
//
// Rules (DESIGN §8, issue 12): the server is AGENT_URL (default http://127.0.0.1:7377, a trailing slash
// is fine) with AGENT_TOKEN as the bearer token, never printed. Exit codes: 0 ok; 1 an error (the
// server's envelope printed as `agentd: E_X: <message>` and `hint: <hint>`), a run that did not end
// complete, a server that does not answer; 2 a usage mistake (one line naming it, then the command's
// usage, on stderr); `exec` exits with the remote command's code; 130 after Ctrl-C. `--json` prints the
// API's own shapes (streams: one JSON object per line); tables are for people: aligned, full ids,
// relative times, costs in dollars; colour only on a terminal and never with NO_COLOR.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// cliCommand is one row of the command table.
type cliCommand struct {
	name, args, summary, example string
	run                          func(c *cli, args []string) error
}

// cliCommands lists every client command in the order `agentd help` shows them.
func cliCommands() []cliCommand {
	return []cliCommand{
		{"init", "[--force] [DIR]", "write a starter agent (DIR/agents/helper.yaml) and a commented config.yaml, then print the next command", "agentd init myagents", (*cli).initProject},
		{"agents", "[--json]", "list agents", "agentd agents", (*cli).agents},
		{"apply", "FILE|DIR...", "create or update agents from YAML or JSON files (a directory: every *.yaml)", "agentd apply examples/", (*cli).apply},
		{"test", "[--parallel N] [--json] [--junit FILE] [--record DIR|--replay DIR] AGENT|FILE|DIR...", "run an agent's test cases (its examples and NAME.test.yaml) as real runs; exit 1 on a failure", "agentd test --replay examples/recordings examples/", (*cli).test},
		{"rm-agent", "NAME...", "delete agents", "agentd rm-agent helper", (*cli).rmAgent},
		{"run", "[--detach] [--yes|--no] [--var K=V]... [--max-steps N] [--max-cost USD] [--approve MODE] [--json] NAME|FILE.yaml [INPUT]", "run an agent and stream it (INPUT from stdin when omitted); a spec file runs in this process, no server needed", `agentd run helper "fix the tests"`, (*cli).runAgent},
		{"runs", "[--agent A] [--status S] [--limit N] [--json] [-q]", "list runs, newest first", "agentd runs --agent helper", (*cli).runs},
		{"logs", "[-f] [--json] RUN", "print a run's events; -f follows a live run", "agentd logs -f run_01…", (*cli).logs},
		{"cancel", "[--json] RUN", "cancel a run in flight", "agentd cancel run_01…", (*cli).cancel},
		{"ps", "[-a] [--json] [-q]", "list computers (-a: stopped ones too)", "agentd ps -q | xargs agentd rm", (*cli).ps},
		{"up", "[--flavor F] [--provider P] [--name N] [--cpus N] [--memory SIZE] [--disk SIZE] [--network MODE] [--allow HOST]... [--package P]... [--persist] [--env K=V]... [--json]", "create a computer and print its id", "agentd up --flavor python", (*cli).up},
		{"exec", "[-i] [-t] [--cwd DIR] [--env K=V]... [--timeout SEC] ID -- CMD...", "run a command in a computer; exits with its code (-it: an interactive terminal)", "agentd exec -it box -- bash", (*cli).exec},
		{"shell", "ID", "an interactive shell on a computer (exec -it ID -- bash, else sh)", "agentd shell box", (*cli).shell},
		{"cp", "SRC DST", "copy files and directories (either side ID:/path)", "agentd cp ./src box:/work/src", (*cli).cp},
		{"rm", "ID...", "destroy computers", "agentd rm box", (*cli).rm},
		{"stop", "[--json] ID...", "stop computers", "agentd stop box", (*cli).stop},
		{"start", "[--json] ID...", "start stopped computers", "agentd start box", (*cli).start},
		{"port", "[--json] ID PORT", "expose a port of a computer on the host", "agentd port box 8080", (*cli).port},
		{"models", "[--json]", "list model providers and models", "agentd models", (*cli).models},
		{"chat", "[-m MODEL] [--json] [PROMPT]", "chat with a model directly (PROMPT from stdin when omitted)", `agentd chat -m haiku "hello"`, (*cli).chat},
		{"approvals", "[--json]", "list pending approvals", "agentd approvals", (*cli).approvals},
		{"approve", "[--remember] [--json] ID", "approve a pending tool call", "agentd approve apr_…", (*cli).approve},
		{"deny", "[--json] ID", "deny a pending tool call", "agentd deny apr_…", (*cli).deny},
		{"triggers", "[--json]", "list mounted triggers and cron jobs", "agentd triggers", (*cli).triggers},
		{"import", "[--source S] [--json] PATH|-", "import a transcript (Claude Code, Codex, ChatGPT, Gemini, markdown, jsonl)", "agentd import ~/.claude/projects/x/s.jsonl", (*cli).importSession},
		{"sessions", "[--limit N] [--json] [-q]", "list the transcripts stored on the server", "agentd sessions", (*cli).sessions},
		{"distill", "[--model M] [--json] ID|PATH", "turn a transcript into an agent spec (YAML on stdout; --json: {distilled, spec, yaml})", "agentd distill s.jsonl > a.yaml && agentd apply a.yaml", (*cli).distill},
		{"events", "[TOPIC...]", "follow the live events, one JSON line per frame", "agentd events runs computers", (*cli).events},
		{"doctor", "[--json]", "what this machine can do (works without a server)", "agentd doctor", (*cli).doctor},
		{"completion", "bash|zsh", "print a shell completion script", `source <(agentd completion bash)`, (*cli).completion},
	}
}

// serverCommands are run() itself; help lists them with the client commands.
var serverHelp = [][3]string{
	{"serve [--host H] [--port P] [--home DIR] [--token-file F] [--log-format text|json] [--log-level L]", "run the server", "agentd serve --port 7377"},
	{"mcp [--keep] [--home DIR] [--log-level L]", "serve MCP over stdio (for Claude Code, Claude Desktop, Cursor)", "claude mcp add agentd -- agentd mcp"},
	{"validate [--json] FILE...", "check agent spec files offline", "agentd validate examples/*.yaml"},
	{"version", "print the version", "agentd version"},
	{"help [COMMAND]", "this overview, or one command's usage", "agentd help run"},
}

// cli is one invocation of a client command.
type cli struct {
	ctx            context.Context
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer
	base, token    string
	client         *http.Client
	cmd            cliCommand
	help           bool          // --help: the first c.flags prints the usage and ends the command
	asJSON         bool          // --json (jsonFlag): print the API's own shapes
	fs             *flag.FlagSet // the command's flags once parsed, for its usage
}

// exitCode ends the program with a code of its own (exec's remote code, 130 after Ctrl-C, a run's 1)
// after its message, if any, was printed.
type exitCode struct {
	code int
	msg  string
}

func (e exitCode) Error() string { return e.msg }

func runCLI(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	name := args[0]
	if name == "__complete" { // hidden: names for shell completion
		name, args = "agents", append([]string{"agents"}, args...)
		c := &cli{ctx: ctx, getenv: getenv, stdout: stdout, stderr: stderr, client: &http.Client{Timeout: 2 * time.Second},
			base: strings.TrimRight(firstNonEmpty(getenv("AGENT_URL"), "http://127.0.0.1:7377"), "/"), token: getenv("AGENT_TOKEN")}
		return c.complete(args[2:])
	}
	for _, cmd := range cliCommands() {
		if cmd.name != name {
			continue
		}
		c := &cli{ctx: ctx, getenv: getenv, stdin: os.Stdin, stdout: stdout, stderr: stderr, cmd: cmd,
			client: &http.Client{}}
		c.base = strings.TrimRight(firstNonEmpty(getenv("AGENT_URL"), "http://127.0.0.1:7377"), "/")
		c.token = getenv("AGENT_TOKEN")
		for _, a := range args[1:] {
			if a == "--" {
				break
			}
			if a == "-h" || a == "--help" {
				return c.showHelp()
			}
		}
		err := cmd.run(c, args[1:])
		var ae *apiError
		if errors.As(err, &ae) {
			ae.Hint = cliHint(ae.Hint)
		}
		return err
	}
	return unknownCommand(name)
}

// showHelp prints a command's usage with one line per flag: the command runs in help mode, and its
// first call of c.flags prints the flags it defines (the one list of them) and ends it.
func (c *cli) showHelp() error {
	c.help = true
	if err := c.cmd.run(c, nil); err != errHelped {
		fmt.Fprint(c.stdout, commandUsage(c.cmd, nil)) // a command without flags
	}
	return nil
}

// errHelped ends a command run in help mode once its usage is printed.
var errHelped = errors.New("help printed")

// unknownCommand is one line with the nearest command's name.
func unknownCommand(name string) error {
	names := []string{"help", "version"}
	for _, s := range serverHelp {
		n, _, _ := strings.Cut(s[0], " ")
		names = append(names, n)
	}
	for _, cmd := range cliCommands() {
		names = append(names, cmd.name)
	}
	msg := fmt.Sprintf("unknown command %q", name)
	if near := nearest(name, names); near != "" {
		msg += fmt.Sprintf("; did you mean `agentd %s`?", near)
	}
	return usageError{msg: msg + " (`agentd help` lists the commands)"}
}

// nearest is the candidate closest to s by edit distance, or "" when none is close enough to be a
// typo (at most a third of the word, and at most 3 edits); a candidate that s is a prefix of wins.
func nearest(s string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if strings.HasPrefix(c, s) && len(s) >= 2 {
			d = min(d, 1)
		}
		if best == "" || d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" || bestD > min(3, max(1, (len(s)+2)/3)) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance with adjacent transpositions counted as one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// commandUsage is a command's usage, its summary, one line per flag of fs (nil: none) and an example.
func commandUsage(cmd cliCommand, fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: agentd %s %s\n\n%s\n", cmd.name, cmd.args, cmd.summary)
	if fs != nil {
		var lines [][2]string
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flagHelp(cmd.name, f)
			lines = append(lines, [2]string{name, usage})
		})
		if len(lines) > 0 {
			b.WriteString("\nflags:\n")
			tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
			for _, l := range lines {
				fmt.Fprintf(tw, "  %s\t%s\n", l[0], l[1])
			}
			tw.Flush()
		}
	}
	fmt.Fprintf(&b, "\nexample: %s\n", cmd.example)
	return b.String()
}

// cliFlagDocs says what each flag of the client commands does, with its values: "command flag" for a
// flag of one command, "flag" for one that means the same everywhere. A `word` in back quotes is the
// flag's value placeholder (flag.UnquoteUsage). A text without "(default" gets the flag's default
// appended. TestCLIHelpEveryFlag fails for a flag without a line here.
var cliFlagDocs = map[string]string{
	"json":             "print the API's own JSON instead of a table (default: off)",
	"q":                "print only ids, one a line (default: off)",
	"init force":       "overwrite the files init writes when they exist (default: off: refuse)",
	"run detach":       "start the run and print its id without streaming it (default: off)",
	"run yes":          "approve every tool call that asks, without prompting (default: off: ask on a terminal, deny otherwise)",
	"run no":           "deny every tool call that asks, without prompting (default: off)",
	"run model":        "run with model `M` (a name, alias or auto) instead of the spec's (default: the spec's model)",
	"run var":          "set the template variable {{K}} to V in the persona: `K=V`, repeatable (default: none)",
	"run max-steps":    "stop after `N` steps; lowers the spec's limits.maxSteps, never raises it (default: the spec's)",
	"run max-cost":     "stop before spending more than `USD` dollars; lowers the spec's limits.maxCostUsd, never raises it (default: the spec's)",
	"run approve":      "the approval `MODE`: auto, ask or readonly; tightens the spec's guardrails.approvalMode, never loosens it (default: the spec's)",
	"runs agent":       "only runs of agent `A` (default: every agent)",
	"runs status":      "only runs that ended `S`: running, complete, step_limit, budget, timeout, aborted, loop, error (default: every status)",
	"runs limit":       "print at most `N` runs",
	"logs f":           "follow a live run until it ends (default: off: print what happened so far)",
	"ps a":             "list stopped computers too (default: off: live ones only)",
	"up flavor":        "the machine's flavor `F`: base, python, node, full, or one named in config.yaml images (default: base)",
	"up provider":      "the provider `P`: auto, docker, podman, kubernetes, sandbox, local (default: the server's computerProvider)",
	"up name":          "a name `N` to use instead of the id (default: none)",
	"up image":         "run image `IMAGE` instead of the flavor's (default: the flavor's image)",
	"up cpus":          "`N` CPUs, fractions allowed (default: the provider's, 2)",
	"up memory":        "memory `SIZE`: megabytes, or 512m, 2g (default: the provider's, 2048m)",
	"up disk":          "disk `SIZE`: megabytes, or 512m, 10g (default: the provider's, 2048m)",
	"up network":       "the network `MODE`: none, egress (out to public addresses, under the allow and deny lists) or full (default: egress)",
	"up allow":         "let the machine reach `HOST` (a name, *.domain or address), repeatable (default: none)",
	"up package":       "install package `P` on first boot with the flavor's package manager, repeatable (default: none)",
	"up persist":       "keep the machine's filesystem across stop and start (default: off)",
	"up env":           "set `K=V` in the machine's environment, repeatable (default: none)",
	"exec i":           "send our stdin to the command (default: off: the command's stdin is empty)",
	"exec t":           "give the command a terminal: raw mode, window size and resize; with -i an interactive session (default: off)",
	"exec cwd":         "run the command in `DIR` (under /work or /tmp) (default: the machine's workdir)",
	"exec env":         "set `K=V` in the command's environment, repeatable (default: none)",
	"exec timeout":     "stop the command after `SEC` seconds, or a duration such as 2m (1-3600; default: 120)",
	"approve remember": "also approve this tool for the rest of the run (default: off)",
	"chat m":           "the model `MODEL` (a name, alias or auto)",
	"import source":    "the transcript's format `S`: claude-code, codex, chatgpt, gemini, markdown, jsonl (default: guessed from the file)",
	"distill model":    "the model `M` that writes the spec (default: auto)",
	"sessions limit":   "print at most `N` stored transcripts, newest first (1-500)",
	"test parallel":    "run at most `N` cases at once (1-16)",
	"test junit":       "also write the results as JUnit XML to `FILE` (default: none)",
	"test record":      "store every model exchange of the cases in `DIR`/<agent>.json, secrets scrubbed (default: none)",
	"test replay":      "answer every model call from the recordings in `DIR` instead of a provider (default: none: the providers)",
}

// flagHelp is one flag's name with its value placeholder, and its documentation with its default.
func flagHelp(cmd string, f *flag.Flag) (string, string) {
	doc, ok := cliFlagDocs[cmd+" "+f.Name]
	if !ok {
		doc = cliFlagDocs[f.Name]
	}
	g := *f
	g.Usage = doc
	arg, usage := flag.UnquoteUsage(&g)
	if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); isBool {
		arg = ""
	}
	name := "-" + f.Name
	if len(f.Name) > 1 {
		name = "--" + f.Name
	}
	if arg != "" {
		name += " " + arg
	}
	if usage != "" && !strings.Contains(usage, "(default") {
		usage += fmt.Sprintf(" (default: %s)", firstNonEmpty(f.DefValue, "none"))
	}
	return name, usage
}

// cliHints names CLI commands where a server hint names an HTTP route: the CLI prints hints for people
// at a shell. Ordered: a longer route before its prefix.
var cliHints = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile("POST /v1/computers/([^/ ]+)/start"), "`agentd start $1`"},
	{regexp.MustCompile("a DELETE of /v1/agents/([^\\s,]+) then a POST of the new spec to /v1/agents"), "`agentd rm-agent $1` then `agentd apply` of the renamed spec"},
	{regexp.MustCompile("PUT /v1/agents/[^\\s,]+"), "`agentd apply FILE`"},
	{regexp.MustCompile("POST /v1/agents/validate"), "`agentd validate FILE`"},
	{regexp.MustCompile("POST /v1/agents"), "`agentd apply FILE`"},
	{regexp.MustCompile("GET /v1/agents"), "`agentd agents`"},
	{regexp.MustCompile("GET /v1/runs"), "`agentd runs`"},
	{regexp.MustCompile("GET /v1/computers/:id/fs"), "`agentd exec ID -- ls -la PATH`"},
	{regexp.MustCompile("GET /v1/computers\\?all=true"), "`agentd ps -a`"},
	{regexp.MustCompile("GET /v1/computers"), "`agentd ps`"},
	{regexp.MustCompile("GET /v1/doctor"), "`agentd doctor`"},
	{regexp.MustCompile("GET /v1/models"), "`agentd models`"},
	{regexp.MustCompile("GET /v1/approvals"), "`agentd approvals`"},
	{regexp.MustCompile("GET /v1/triggers"), "`agentd triggers`"},
	{regexp.MustCompile("GET /v1/sessions"), "`agentd sessions`"},
}

// cliHint rewrites a server hint for the command line.
func cliHint(h string) string {
	for _, r := range cliHints {
		h = r.re.ReplaceAllString(h, r.repl)
	}
	return h
}

// overview is `agentd help`: every command with a one-line description, and an example under it.
func overview() string {
	var b strings.Builder
	b.WriteString("agentd — a self-hosted control plane for AI agents\n\nusage: agentd COMMAND [ARGS]\n\nServer:\n")
	// One table for both sections, so the columns line up: name, summary, and the example under it.
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, s := range serverHelp {
		name, _, _ := strings.Cut(s[0], " ")
		fmt.Fprintf(tw, "  %s\t%s\n\t  $ %s\n", name, s[1], s[2])
	}
	fmt.Fprintln(tw, "\nClient (AGENT_URL, default http://127.0.0.1:7377; AGENT_TOKEN):")
	for _, cmd := range cliCommands() {
		fmt.Fprintf(tw, "  %s\t%s\n\t  $ %s\n", cmd.name, cmd.summary, cmd.example)
	}
	tw.Flush()
	b.WriteString("\nRun `agentd help COMMAND` for a command's usage and an example.\n")
	return b.String()
}

func runHelp(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, overview())
		return nil
	}
	for _, cmd := range cliCommands() {
		if cmd.name == args[0] {
			return runCLI(context.Background(), []string{cmd.name, "--help"}, func(string) string { return "" }, stdout, io.Discard)
		}
	}
	for _, s := range serverHelp {
		if strings.HasPrefix(s[0], args[0]+" ") || s[0] == args[0] {
			fmt.Fprintf(stdout, "usage: agentd %s\n\n%s\n\nexample: %s\n", s[0], s[1], s[2])
			return nil
		}
	}
	return unknownCommand(args[0])
}

// flags parses a command's flags; any mistake is a usage error with the command's usage. Flags may come
// before or after the positional arguments (until `--`).
func (c *cli) flags(args []string, define func(fs *flag.FlagSet), minArgs, maxArgs int) ([]string, error) {
	fs := flag.NewFlagSet(c.cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	define(fs)
	c.fs = fs
	if c.help {
		fmt.Fprint(c.stdout, commandUsage(c.cmd, fs))
		return nil, errHelped
	}
	var pos, tail []string
	if i := slices.Index(args, "--"); i >= 0 { // everything after -- is an argument (exec's command)
		args, tail = args[:i], args[i+1:]
	}
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, c.flagError(fs, err)
		}
		if args = fs.Args(); len(args) > 0 {
			pos, args = append(pos, args[0]), args[1:]
		}
	}
	pos = append(pos, tail...)
	if len(pos) < minArgs {
		return nil, c.usage("missing arguments")
	}
	if maxArgs >= 0 && len(pos) > maxArgs {
		return nil, c.usage("unexpected argument %q", pos[maxArgs])
	}
	return pos, nil
}

// jsonFlag defines --json, the one flag of that meaning, on a command's flags.
func (c *cli) jsonFlag(fs *flag.FlagSet) { fs.BoolVar(&c.asJSON, "json", false, "") }

func (c *cli) usage(format string, a ...any) error {
	return usageError{msg: fmt.Sprintf("%s: %s", c.cmd.name, fmt.Sprintf(format, a...)), usage: commandUsage(c.cmd, c.fs)}
}

// flagError is a flag mistake in one line: an unknown flag names the nearest one the command has.
func (c *cli) flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if bad, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if len(strings.TrimLeft(bad, "-")) > 1 {
			bad = "--" + strings.TrimLeft(bad, "-")
		}
		msg = fmt.Sprintf("unknown flag %s", bad)
		if near := nearest(strings.TrimLeft(bad, "-"), names); near != "" {
			dash := "-"
			if len(near) > 1 {
				dash = "--"
			}
			msg += fmt.Sprintf("; did you mean %s%s?", dash, near)
		}
	}
	return usageError{msg: fmt.Sprintf("%s: %s (`agentd %s --help` lists its flags)", c.cmd.name, msg, c.cmd.name)}
}

// ---- the /v1 client ----

// call sends one request and decodes a JSON answer into out (when out is not nil). An error envelope
// becomes the *apiError it carries.
func (c *cli) call(method, path string, body any, out any) error {
	resp, err := c.send(c.ctx, method, path, body, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil && err != io.EOF {
		return fmt.Errorf("the server's answer to %s %s is not JSON: %v", method, path, err)
	}
	return nil
}

// send makes a request and returns the response when its status is below 400.
func (c *cli) send(ctx context.Context, method, path string, body any, header http.Header) (*http.Response, error) {
	var rd io.Reader
	ctype := "application/json"
	switch b := body.(type) {
	case nil:
	case []byte:
		rd, ctype = bytes.NewReader(b), "application/octet-stream"
	case io.Reader:
		rd, ctype = b, "application/octet-stream"
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("AGENT_URL %q is not a URL: %v", c.base, err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, c.unreachable(err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, c.envelope(resp)
	}
	return resp, nil
}

func (c *cli) unreachable(err error) error {
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) || strings.Contains(err.Error(), "connection refused") {
		return &apiError{Code: "", Message: fmt.Sprintf("no agentd server answers at %s (AGENT_URL)", c.base),
			Hint: "start one with `agentd serve`, or set AGENT_URL to the server's address"}
	}
	return err
}

// envelope turns an error answer into its *apiError; a 401 says which variable to set.
func (c *cli) envelope(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var env struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(b, &env) != nil || env.Error == nil {
		return fmt.Errorf("%s answered %s: %s", c.base, resp.Status, strings.TrimSpace(string(b)))
	}
	if resp.StatusCode == http.StatusUnauthorized && env.Error.Code == codeNoCredentials &&
		strings.Contains(env.Error.Message, "bearer token") {
		env.Error.Hint = "set AGENT_TOKEN to the server's token"
		if c.token != "" {
			env.Error.Hint = "AGENT_TOKEN does not match the server's token"
		}
	}
	return env.Error
}

// ---- output ----

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints rows under a header, aligned.
func (c *cli) table(header []string, rows [][]string) {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	if c.color() {
		fmt.Fprintf(tw, "\x1b[1m%s\x1b[0m\n", strings.Join(header, "\t"))
	} else {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// color: only on a terminal, never with NO_COLOR.
func (c *cli) color() bool {
	if c.getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := c.stdout.(*os.File)
	return ok && isTerminal(f)
}

func (c *cli) paint(code, s string) string {
	if !c.color() {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// ago renders a timestamp as a relative time for people.
func ago(ts string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil || ts == "" {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "in " + roundDur(-d)
	case d < time.Second:
		return "just now"
	}
	return roundDur(d) + " ago"
}

func roundDur(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func dollars(v float64) string { return fmt.Sprintf("$%.4f", v) }

// progress writes a line about a long wait to stderr.
func (c *cli) progress(format string, a ...any) {
	fmt.Fprintf(c.stderr, format+"\n", a...)
}

// ---- SSE ----

type cliEvent struct {
	id    string
	event string
	data  []byte
}

// readEvents calls fn for every event of an SSE body until `event: done` (true) or the end (false); an
// `event: error` frame ends it with its error.
func readEvents(r io.Reader, fn func(ev cliEvent) error) (bool, error) {
	rd := newSSEReader(r, 32<<20)
	for {
		event, data, err := rd.next()
		switch {
		case errors.Is(err, io.EOF) || err == nil && rd.cut:
			return false, nil
		case err != nil:
			return false, err
		case event == "done":
			return true, nil
		case event == "error" && data != nil:
			return false, streamError(data)
		case data != nil:
			if err := fn(cliEvent{id: rd.id, event: event, data: data}); err != nil {
				return false, err
			}
		}
	}
}

// stream sends a request for an SSE answer and reads it with readEvents.
func (c *cli) stream(method, path string, body any, fn func(ev cliEvent) error) (bool, error) {
	resp, err := c.send(c.ctx, method, path, body, http.Header{"Accept": {"text/event-stream"}})
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	return readEvents(resp.Body, fn)
}

// listing starts a command whose one flag is --json: it GETs path into out and, with --json, prints
// it; done is true when nothing is left for the command to do.
func (c *cli) listing(args []string, path string, out any) (done bool, err error) {
	if _, err := c.flags(args, c.jsonFlag, 0, 0); err != nil {
		return true, err
	}
	if err := c.call("GET", path, nil, out); err != nil {
		return true, err
	}
	if c.asJSON {
		return true, c.printJSON(out)
	}
	return false, nil
}

// availability is a provider's or a model's state, coloured.
func (c *cli) availability(ok bool) string {
	if ok {
		return c.paint("32", "available")
	}
	return c.paint("31", "unavailable")
}

// streamError turns an `event: error` frame into its error.
func streamError(data []byte) error {
	var env struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(data, &env) == nil && env.Error != nil {
		return env.Error
	}
	return fmt.Errorf("stream error: %s", data)
}

func queryOf(kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	return slices.Sorted(maps.Keys(m))
}
