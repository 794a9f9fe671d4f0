// Command agentd is a self-hosted control plane for AI agents: sandboxed computers (Docker, Podman or a
// guarded local directory) with exec, files, ports and a terminal; agent specs in YAML; runs of agents
// against real model providers under cost, token, step and time ceilings with human approval of dangerous
// tool calls; triggers; live events; a dashboard. One binary, one SQLite file.
//
// Usage:
//
//	agentd serve [--host H] [--port P] [--home DIR] [--token-file F]
//	agentd validate [--json] FILE...   (agent specs, YAML or .json; exit 1 when one is invalid)
//	agentd version
//
// Configuration precedence: flag > environment (AGENT_HOME, AGENT_HOST, AGENT_PORT, AGENT_TOKEN) >
// $AGENT_HOME/config.yaml > defaults. The API contract is docs/API.md; README.md is the quick start.
//
// # Audit map
//
// Every place agentd's trust boundary is crossed, in the order a request meets it (about 3,990 lines
// in the functions named; each stop names its file.go:Func, and TestAuditMapIsTrue fails when one no
// longer exists or a stop outgrows its stated size):
//
//  1. The HTTP gate: api.go:(*server).ServeHTTP (request id, the body cap, refusals decided from the
//     headers alone and answered without waiting for a body: api.go:(*server).refuseEarly), the
//     foreign-Origin and DNS-rebinding refusals (api.go:(*server).originAllowed, api.go:loopbackHostHeader,
//     api.go:(*server).cors; `/mcp` from a loopback origin is the one exemption, mcp_http.go:mcpLoopbackOrigin),
//     the bearer token (api.go:(*server).authorized, api.go:bearerToken, api.go:tokenEqual: constant time;
//     `?token=` only on GET streams), public metrics (api.go:(*server).publicMetrics); slow and
//     descriptor-hungry clients (api_conns.go:(*connLimiter).Accept, api_conns.go:(*connLimiter).victimLocked,
//     api.go:(*progressBody).Read); one strict decoder for every JSON body, duplicate keys refused
//     (api.go:decodeJSON, api.go:duplicateKey, api.go:exactKeys); one error map, unclassified errors logged
//     under the request id and never answered (api.go:(*server).publicError). [342 lines]
//  2. Webhook signatures and replays: triggers.go:verifyWebhook (GitHub HMAC, Standard Webhooks with its
//     timestamp; constant-time compares), triggers.go:signedPromptOnly (on a signed webhook the prompt is
//     the signed body), api_idempotency.go:(*replayBook).begin (a GitHub-signed body once per window),
//     triggers.go:(*server).handleWebhookTrigger. [150 lines]
//  3. The command policy, one function for every exec (API, terminal, agent tool, MCP):
//     computers_policy.go:(commandPolicy).check, computers_policy.go:builtinDenied,
//     computers_policy.go:interpreterDenied, computers_policy.go:hasExpansion,
//     computers_policy.go:splitCommand, computers_policy.go:firstWord, computers_policy.go:normalizePaths,
//     computers_policy.go:stripWrapper (strace, chroot DIR, flock FILE ... run their operand),
//     computers_policy.go:rmEmptyTarget, computers_policy.go:emptyExpansions,
//     computers_policy.go:dropSubstitutions (a recursive delete judged with its expansions empty)
//     (what it cannot see is refused; a person's tty session is judged like a human-approved call:
//     computers_terminal.go:(*computerService).ExecTTY); a spec's setup, judged before its machine exists
//     (every creation, and agent spec validation: computers_policy.go:setupRefused). [668 lines]
//  4. The file jail and archives: computers_files.go:lexicalJail, computers_files.go:(*computerService).jail
//     (only /work and /tmp, resolved inside the machine, still inside), computers_helper.go:canonicalPath
//     and computers_helper.go:openChecked (the same check where the file is opened, in the machine),
//     computers_files.go:checkArchive, computers_files.go:resolveInArchive, computers_files.go:untarTo,
//     computers_files.go:leadsInside (links, specials and bombs refused before a byte is written; one
//     extractor on os.Root for the server and `agentd cp`). computers_files.go:tarTo, the one writer, never
//     follows a link. [360 lines]
//  5. Host reads: a sessions `path` (sessions.go:(*sessionService).checkPath,
//     sessions.go:(*sessionService).importPath: one message that reveals nothing of a file it cannot
//     import), mount sources (computers_spec.go:(*computerService).openMountSources,
//     computers_spec.go:(*computerService).checkMountSource, computers_engine_linux.go:openNoFollow:
//     allowedMounts, opened from / without following a link at create and at every start; bound by
//     descriptor on the sandbox, checked by device and inode on docker and podman:
//     computers_engine.go:(*engineProvider).verifyMounts), config and token files (main.go:loadConfig,
//     main.go:parseConfigFile), Cursor's chat database (sessions_cursor.go:openCursorDB: read-only, through
//     the same path check). [308 lines]
//  6. Network on a machine's behalf: computers_netpolicy.go:(netPolicy).checkURL,
//     computers_netpolicy.go:(netPolicy).checkHost, computers_netpolicy.go:privateIP,
//     computers_netpolicy.go:ownIP (every address of every interface, at each dial),
//     computers_netpolicy.go:(netPolicy).dial (the checked address is the dialled one; fetch_url,
//     http_request and the egress proxy all dial here), computers_netpolicy.go:(netPolicy).httpClient;
//     the egress proxy and its server-name gate (computers_egress.go:(*computerService).serveEgress,
//     computers_egress.go:(*helloGate).ReadFrom, computers_egress.go:clientHelloSNI:
//     crypto/tls reads the server name); port forwarding, which dials only into the machine
//     (computers_ports.go:(*computerService).ExposePort, computers_ports.go:(*computerService).reachable);
//     web_search's providers, the server's key sent only in their own header
//     (runs_tools_search.go:searchCall). [342 lines]
//  7. Redaction and approvals: runs_guard.go:newRedactor, runs_guard.go:(*redactor).redact,
//     runs_guard.go:(*streamRedactor).write (secrets out of tool results, events, warnings, errors),
//     runs_guard.go:effectiveApprovalMode (tighten only), runs_approvals.go:(*approvalBook).request (ask
//     fails closed), runs_approvals.go:(*approvalBook).answer; recorded model exchanges leave the server
//     (agentd test --record) only through runs_replay.go:scrubExchange. [162 lines]
//  8. Host processes: the engines' argv (computers_engine.go:(*engineProvider).runArgs,
//     computers_spec.go:checkEngineArgs: caps dropped, no-new-privileges, read-only root, uid 1000, limits,
//     no NUL, mount targets that cover nothing the machine needs: computers_spec.go:checkMountTarget;
//     every call through computers_engine.go:(*engineProvider).call; an exec over the exec channel, else
//     the one per-call fallback: computers_percall.go:(*computerService).machineCommand), kubectl
//     (computers_kubernetes.go:(*kubeProvider).cli, computers_kubernetes.go:(*kubeProvider).podDoc and the
//     pod template it fills, kubeManifests), bwrap
//     (computers_sandbox.go:(*sandboxProvider).bwrapArgs), the local provider (computers_local.go:(*localProvider).command:
//     an environment allow-list, never the server's secrets; it guards, it does not isolate), MCP servers
//     from config (mcp_client.go:(*mcpConn).open); the ssh host (issue 29): one helper for every ssh
//     process (computers_ssh.go:(*sshProvider).opts, computers_ssh.go:(*sshProvider).cli: BatchMode, host
//     keys checked against the configured known_hosts, strictly unless acceptNewHostKeys, only the
//     configured key, no agent or X11 forwarding), what runs there (computers_ssh.go:(*sshProvider).execScript:
//     env -i, the machine's private directory, a cwd still inside once its links are followed; over the exec
//     channel: computers_ssh_chan.go:(*sshProvider).remoteHelper, the binary copied there once, and
//     computers_ssh_chan.go:(*sshProvider).helperCmd, the helper under env -i with the machine's own pid
//     files, computers_ssh_chan.go:(*sshProvider).channelCommand, the cwd resolved there) and its files
//     (computers_ssh_fs.go:(*sshFS).resolve: the host's paths resolved there and mapped back into the jail);
//     without multiplexing each forwarded port's `ssh -N -L` on this host's loopback
//     (computers_ssh.go:(*sshProvider).runTunnel). [574 lines]
//  9. Kernel state: iptables (computers_fullnet.go:fullRules, computers_fullnet.go:(*engineProvider).filterFull,
//     computers_sandboxnet.go:sandboxNetRules), namespaces (computers_sandboxnet.go:(*sandboxProvider).netUp),
//     cgroups (computers_sandbox_cgroup.go:(cgroupHost).create, computers_sandbox_cgroup.go:(cgroupHost).remove),
//     uid maps (computers_sandbox_userns.go:(*sandboxProvider).startHelper), the helper's drop and seccomp
//     (computers_sandbox_linux.go:helperBecome, computers_sandbox_linux.go:helperBecame,
//     computers_sandbox_linux.go:denyUserNamespaces), the one mount agentd makes on the host
//     (computers_sandbox_disk.go:(*sandboxProvider).mountDisk). [462 lines]
//  10. The exec channel, an untrusted peer (every frame the host parses comes from the machine):
//     computers_wire.go:readFrame, computers_channel.go:(*execChannel).frame,
//     computers_channel.go:(*chanProc).deliver, computers_channel.go:(*execChannel).accepted,
//     computers_channel_sock.go:acceptHelper (the one connection presenting the token; constant time),
//     computers_channel_sock.go:listenUnixIn. [184 lines]
//  11. The browser in the machine (issue 28): its network is the machine's — `browse` dials the machine's
//     loopback through its port path and every other host through its network policy
//     (computers_browse.go:(*computerService).machineClient, computers_browse.go:isLoopbackName,
//     computers_browse.go:(*computerService).machineDial, computers_browse.go:(*computerService).Browse),
//     Chromium's through the egress proxy (computers_browser.go:browserFlags), only http(s) pages
//     (computers_browser.go:checkBrowserURL); Chromium is started through Exec, so under the command policy
//     (computers_browser.go:(*computerService).startBrowser); its DevTools endpoint is an untrusted peer
//     (computers_browser.go:parseDevToolsActivePort, computers_browser_cdp.go:dialCDP,
//     computers_browser_cdp.go:(*cdpConn).read, computers_browser_cdp.go:(*cdpConn).handle: bounded messages, unknown ones dropped), and a ref acts
//     only on the document it was read from (computers_browser.go:(*machineBrowser).checkRef). [322 lines]
//  12. The Fly Machines API, a remote service holding a secret: computers_fly.go:(*flyProvider).do (THE
//     call: FLY_API_TOKEN read at each call, sent only in the Authorization header, scrubbed from Fly's
//     error bodies, never logged), computers_fly.go:(*flyProvider).execCall (every byte of an exec and of
//     the file scripts crosses here, base64 both ways, after the command policy), computers_fly.go:(*flyProvider).list
//     (only machines whose metadata names this server's owner are adopted or reaped). [116 lines]
//
// This file holds main, run (the testable entry point), configuration loading and the serve lifecycle
// (SIGHUP re-reads config.yaml: main_reload.go).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
)

const version = "0.1.0"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	interrupted := ctx.Err() != nil
	stop()
	os.Exit(exitStatus(err, interrupted, os.Stderr))
}

// exitStatus prints err the way DESIGN §8 wants and returns the process's exit code.
func exitStatus(err error, interrupted bool, stderr io.Writer) int {
	var ec exitCode
	var ue usageError
	var ae *apiError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		if ec.msg != "" {
			fmt.Fprintln(stderr, "agentd:", ec.msg)
		}
		return ec.code
	case interrupted && errors.Is(err, context.Canceled):
		return 130
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "agentd:", ue.msg)
		if ue.usage != "" {
			fmt.Fprint(stderr, "\n"+ue.usage)
		}
		return 2
	}
	fmt.Fprintln(stderr, "agentd:", err)
	if errors.As(err, &ae) && ae.Hint != "" {
		fmt.Fprintln(stderr, "hint:", ae.Hint)
	}
	return 1
}

// usageError marks a command-line mistake (exit code 2); usage is printed after it.
type usageError struct{ msg, usage string }

func (e usageError) Error() string { return e.msg }

// run is the whole program behind main: it parses args and runs one command until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, overview())
		return nil
	}
	if (args[0] == "serve" || args[0] == "validate" || args[0] == "mcp") && (slices.Contains(args[1:], "-h") || slices.Contains(args[1:], "--help")) {
		return runHelp(args[:1], stdout) // DESIGN §8: CMD --help is usage on stdout, exit 0
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], getenv, stdout, stderr)
	case "validate":
		return runValidate(args[1:], stdout)
	case "mcp": // the MCP server over stdio (mcp_stdio.go)
		return runMCP(ctx, args[1:], getenv, os.Stdin, stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "agentd %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return nil
	case "help", "-h", "--help":
		return runHelp(args[1:], stdout)
	case "machine-helper": // hidden: the in-machine end of the exec channel (computers_helper.go)
		return machineHelperMain(args[1:], os.Stdin, stdout) // computers_sandbox.go: its flags
	case "netprobe": // hidden: the in-pod half of the kubernetes network-policy check (computers_kubernetes_netcheck.go)
		return netprobeMain(args[1:], os.Stdin, stdout)
	}
	return runCLI(ctx, args, getenv, stdout, stderr)
}

// runValidate checks agent spec files offline with the server's own parser: every issue of every file,
// and exit code 1 when any file is invalid.
func runValidate(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print a JSON array of {file, ok, issues}")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		return usageError{msg: "validate: missing FILE", usage: "usage: agentd validate [--json] FILE...\n"}
	}
	type result struct {
		File     string   `json:"file"`
		OK       bool     `json:"ok"`
		Issues   []string `json:"issues,omitempty"`
		Warnings []string `json:"warnings,omitempty"` // legal but will not work (spec_warnings.go)
	}
	var results []result
	bad := 0
	for _, file := range fs.Args() {
		b, err := os.ReadFile(file)
		var issues, warnings []string
		var spec *AgentSpec
		switch {
		case err != nil:
			issues = []string{"(root): " + err.Error()}
		case isTestFile(file): // an agent's tests (runs_tests.go), checked as strictly as a spec
			_, tis := parseAgentTests(string(b))
			issues = issueStrings(tis)
		case strings.EqualFold(filepath.Ext(file), ".json"):
			spec, issues = parseSpecJSON(b)
		default:
			spec, issues = parseSpecYAML(string(b))
		}
		if len(issues) > 0 {
			bad++
		}
		if spec != nil {
			warnings = specWarnings(spec)
		}
		results = append(results, result{File: file, OK: len(issues) == 0, Issues: issues, Warnings: warnings})
	}
	if *asJSON {
		b, _ := json.MarshalIndent(results, "", "  ")
		fmt.Fprintln(stdout, string(b))
	} else {
		for _, r := range results {
			if r.OK {
				fmt.Fprintf(stdout, "%s: ok\n", r.File)
			}
			for _, is := range r.Issues {
				fmt.Fprintf(stdout, "%s: %s\n", r.File, is)
			}
			for _, w := range r.Warnings {
				fmt.Fprintf(stdout, "%s: warning: %s\n", r.File, w)
			}
		}
	}
	if bad > 0 {
		return errorf(codeSpecInvalid, "%d of %d spec file(s) invalid", bad, len(results)).withHint("fix the lines above")
	}
	return nil
}

// config is every setting of the server after precedence is applied.
type config struct {
	Home              string                     `yaml:"-"`
	Host              string                     `yaml:"host"`
	Port              int                        `yaml:"port"`
	Token             string                     `yaml:"-"` // only from the environment or --token-file
	CORSOrigins       []string                   `yaml:"corsOrigins"`
	MaxComputers      int                        `yaml:"maxComputers"`
	ComputerProvider  string                     `yaml:"computerProvider"`
	Images            map[string]string          `yaml:"images"`
	AllowedRegistries []string                   `yaml:"allowedRegistries"` // registries a spec's image may come from
	AllowedMounts     []string                   `yaml:"allowedMounts"`     // host directories a spec's mounts may come from
	ModelAliases      map[string]string          `yaml:"modelAliases"`
	MaxCostUSD        float64                    `yaml:"maxCostUsd"`
	ReaperIntervalSec int                        `yaml:"reaperIntervalSec"`
	LogFormat         string                     `yaml:"logFormat"`   // text or json
	LogLevel          string                     `yaml:"logLevel"`    // debug, info, warn or error
	ExecChannel       *bool                      `yaml:"execChannel"` // the warm exec channel into docker/podman machines; default on
	WarmPool          map[string]int             `yaml:"warmPool"`    // flavor → running machines kept ready (computers_pool.go)
	MCPServers        map[string]mcpServerConfig `yaml:"mcpServers"`  // MCP servers whose tools agents may use (mcp_client.go)

	// Protocols (issue 18): GET /metrics answers without the token when true (metrics.go).
	MetricsPublic bool `yaml:"metricsPublic"`

	// Kubernetes (issue 19): machines as pods through kubectl; the provider exists only when this is set.
	Kubernetes *kubeConfig `yaml:"kubernetes"`

	// SSH (issue 29): machines as directories on a Linux host over ssh; the provider exists only when set.
	SSH *sshConfig `yaml:"ssh"`
	// Fly Machines (issue 29): machines as Fly.io microVMs through the Machines API; only when this is set.
	Fly *flyConfig `yaml:"fly"`

	// Issue 30: the model an agent runs on when its spec's model is `auto` (as when it names none);
	// triggers: false mounts no trigger routes and runs no cron; the cap on a request body.
	Model          string `yaml:"model"`
	Triggers       *bool  `yaml:"triggers"`
	BodyLimitBytes int64  `yaml:"bodyLimitBytes"`

	firstRun     bool
	serveArgs    []string            // the flags it was loaded with: a reload reads config.yaml under the same ones
	level        *slog.LevelVar      // the logger's level (logLevel), which a reload changes (main_reload.go)
	noTriggers   bool                // `agentd mcp` in-process: the server's triggers are not mounted here
	helperBinary string              // the binary mounted into machines for the exec channel; "" is this executable
	getenv       func(string) string // the process environment, for provider keys; never logged
}

func defaultConfig() config {
	return config{
		Host: "127.0.0.1", Port: 7377, MaxComputers: 8, ComputerProvider: "auto",
		MaxCostUSD: 5, ReaperIntervalSec: 30, BodyLimitBytes: maxBodyBytes,
	}
}

// triggersOn reports config.yaml's triggers (default true).
func (cfg *config) triggersOn() bool { return cfg.Triggers == nil || *cfg.Triggers }

// loadConfig applies defaults < config.yaml < environment < flags, and creates the data directory.
// minTokenLen is the shortest bearer token a non-loopback server accepts (a shorter one is warned about
// on loopback).
const minTokenLen = 16

const serveUsage = "usage: agentd serve [--host H] [--port P] [--home DIR] [--token-file F] [--log-format text|json] [--log-level L]\n"

var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// newLogger is the server's one logger: text or JSON lines on stderr at the configured level.
func newLogger(cfg config, stderr io.Writer) *slog.Logger {
	var level slog.Leveler = logLevels[cfg.LogLevel]
	if cfg.level != nil {
		level = cfg.level
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(stderr, opts))
	}
	return slog.New(slog.NewTextHandler(stderr, opts))
}

func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error is printed once, with serveUsage
	host := fs.String("host", "", "address to bind (default 127.0.0.1)")
	port := fs.Int("port", -1, "port to bind (default 7377; 0 picks a free one)")
	home := fs.String("home", "", "data directory (default $AGENT_HOME or ~/.agentd)")
	tokenFile := fs.String("token-file", "", "file holding the bearer token")
	logFormat := fs.String("log-format", "", "text or json (default text)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (default info)")
	if err := fs.Parse(args); err != nil {
		return config{}, usageError{msg: err.Error(), usage: serveUsage}
	}
	if fs.NArg() > 0 {
		return config{}, usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0)), usage: serveUsage}
	}

	cfg := defaultConfig()
	cfg.getenv = getenv
	cfg.Home = firstNonEmpty(*home, getenv("AGENT_HOME"))
	if cfg.Home == "" {
		dir := getenv("HOME")
		if dir == "" {
			d, err := os.UserHomeDir()
			if err != nil {
				return config{}, errorf(codeConfig, "cannot find a home directory: %v", err).withHint("set AGENT_HOME")
			}
			dir = d
		}
		cfg.Home = filepath.Join(dir, ".agentd")
	}
	if _, err := os.Stat(cfg.Home); errors.Is(err, os.ErrNotExist) {
		cfg.firstRun = true
	}
	if err := os.MkdirAll(cfg.Home, 0o700); err != nil {
		return config{}, errorf(codeConfig, "cannot create data directory %s: %v", cfg.Home, err).withHint("set AGENT_HOME to a writable directory")
	}

	if b, err := os.ReadFile(filepath.Join(cfg.Home, "config.yaml")); err == nil {
		if err := parseConfigFile(b, &cfg); err != nil {
			return config{}, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return config{}, errorf(codeConfig, "read config.yaml: %v", err)
	}

	if v := getenv("AGENT_HOST"); v != "" {
		cfg.Host = v
	}
	if v := getenv("AGENT_PORT"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			return config{}, errorf(codeConfig, "AGENT_PORT=%q is not a number", v).withHint("set AGENT_PORT to a port such as 7377")
		}
		cfg.Port = p
	}
	cfg.Token = getenv("AGENT_TOKEN")
	cfg.LogFormat = firstNonEmpty(*logFormat, getenv("AGENT_LOG_FORMAT"), cfg.LogFormat, "text")
	cfg.LogLevel = firstNonEmpty(*logLevel, getenv("AGENT_LOG_LEVEL"), cfg.LogLevel, "info")
	if *host != "" {
		cfg.Host = *host
	}
	fs.Visit(func(f *flag.Flag) { // an explicit --port, even a negative one, is the user's and is checked
		if f.Name == "port" {
			cfg.Port = *port
		}
	})
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return config{}, errorf(codeConfig, "read token file: %v", err)
		}
		cfg.Token = strings.TrimSpace(string(b))
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		return config{}, errorf(codeConfig, "log format %q is not text or json", cfg.LogFormat).withHint("use --log-format text|json (or AGENT_LOG_FORMAT)")
	}
	if _, ok := logLevels[cfg.LogLevel]; !ok {
		return config{}, errorf(codeConfig, "log level %q is not debug, info, warn or error", cfg.LogLevel).withHint("use --log-level (or AGENT_LOG_LEVEL)")
	}
	cfg.serveArgs, cfg.level = args, newLevel(cfg.LogLevel)
	if cfg.Port < 0 || cfg.Port > 65535 {
		return config{}, errorf(codeConfig, "port %d is out of range 0-65535", cfg.Port)
	}
	if err := cfg.check(); err != nil {
		return config{}, err
	}
	if cfg.Token != "" && len(cfg.Token) < minTokenLen && !isLoopbackHost(cfg.Host) {
		return config{}, errorf(codeConfig, "refusing to bind %s with a %d-character token: a token guessable in an afternoon guards shell access to this host", cfg.Host, len(cfg.Token)).
			withHint(fmt.Sprintf("use a token of at least %d characters (openssl rand -hex 24)", minTokenLen))
	}
	if cfg.Token == "" && !isLoopbackHost(cfg.Host) {
		return config{}, errorf(codeConfig, "refusing to bind %s without a token: the API can execute shell commands on this host", cfg.Host).
			withHint("set AGENT_TOKEN (or --token-file) or bind 127.0.0.1")
	}
	return cfg, nil
}

// configKeys are the keys config.yaml accepts (DESIGN §2): the yaml tags of config, so a setting added
// there is accepted here (a hand-kept list drifted and refused the documented logFormat).
func configKeys() []string {
	var keys []string
	t := reflect.TypeFor[config]()
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("yaml"); tag != "" && tag != "-" {
			keys = append(keys, tag)
		}
	}
	return keys
}

// parseConfigFile reads config.yaml strictly: an unknown key is an E_CONFIG error naming it.
func parseConfigFile(b []byte, cfg *config) error {
	keys := configKeys()
	hint := "known keys: " + strings.Join(keys, ", ") + "; " + takesEffect("")
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return errorf(codeConfig, "config.yaml: %s", strings.TrimPrefix(err.Error(), "yaml: ")).withHint(hint)
	}
	if len(doc.Content) == 0 {
		return nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return errorf(codeConfig, "config.yaml must be a mapping of settings").withHint(hint)
	}
	for i := 0; i < len(root.Content); i += 2 {
		k := root.Content[i].Value
		switch {
		case k == "token":
			return errorf(codeConfig, "config.yaml: unknown key %q: the token is never read from the config file", k).
				withHint("set AGENT_TOKEN in the environment or pass --token-file")
		case !slices.Contains(keys, k):
			return errorf(codeConfig, "config.yaml: unknown key %q (line %d)", k, root.Content[i].Line).withHint(hint)
		}
	}
	if err := root.Decode(cfg); err != nil {
		return errorf(codeConfig, "config.yaml: %s", strings.TrimPrefix(err.Error(), "yaml: ")).withHint(hint)
	}
	return nil
}

// check refuses values the services could not run with, naming the key.
func (cfg config) check() error {
	bad := func(key string, v any, want string) error {
		return errorf(codeConfig, "config.yaml: %s is %v; it must be %s", key, v, want).
			withHint("fix " + key + " in " + filepath.Join(cfg.Home, "config.yaml") + ", " + takesEffect(key))
	}
	if err := checkMCPServers(cfg.MCPServers); err != nil {
		return err
	}
	switch {
	case cfg.BodyLimitBytes < 1024:
		return bad("bodyLimitBytes", cfg.BodyLimitBytes, "at least 1024 (bytes)")
	case cfg.Model != strings.TrimSpace(cfg.Model) || strings.ContainsAny(cfg.Model, " \t\n"):
		return bad("model", fmt.Sprintf("%q", cfg.Model), "a model name, alias or provider/model id without spaces")
	case cfg.MaxComputers < 0:
		return bad("maxComputers", cfg.MaxComputers, "0 or more")
	case cfg.ReaperIntervalSec < 1:
		return bad("reaperIntervalSec", cfg.ReaperIntervalSec, "at least 1")
	case cfg.MaxCostUSD < 0:
		return bad("maxCostUsd", cfg.MaxCostUSD, "0 or more")
	case !slices.Contains([]string{"auto", "docker", "podman", "kubernetes", "sandbox", "local", "ssh", "fly"}, cfg.ComputerProvider):
		return bad("computerProvider", fmt.Sprintf("%q", cfg.ComputerProvider), "one of auto, docker, podman, kubernetes, sandbox, local, ssh, fly")
	case cfg.ComputerProvider == "kubernetes" && cfg.Kubernetes == nil: // issue 19: only when configured
		return bad("computerProvider", `"kubernetes"`, "set only with a kubernetes: block saying where the cluster is")
	case cfg.ComputerProvider == "ssh" && cfg.SSH == nil: // issue 29: only when configured
		return bad("computerProvider", `"ssh"`, "set only with an ssh: block saying which host (target: user@host)")
	case cfg.ComputerProvider == "fly" && cfg.Fly == nil: // issue 29: only when configured
		return bad("computerProvider", `"fly"`, "set only with a fly: block naming the app (fly: {app: NAME, region: CODE})")
	case cfg.Fly != nil && cfg.Fly.App == "":
		return bad("fly.app", `""`, "the Fly app the machines belong to (create it with fly apps create NAME)")
	case cfg.Fly != nil && cfg.Fly.CPUKind != "" && cfg.Fly.CPUKind != "shared" && cfg.Fly.CPUKind != "performance":
		return bad("fly.cpuKind", fmt.Sprintf("%q", cfg.Fly.CPUKind), "shared or performance")
	}
	if cfg.SSH != nil {
		if err := cfg.SSH.check(); err != nil {
			return err
		}
	}
	return checkWarmPool(cfg.WarmPool, cfg.MaxComputers, bad) // computers_pool.go
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// runServe starts the server and blocks until ctx ends, then shuts down in a fixed order.
func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := newLogger(cfg, stderr)

	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return errorf(codeConfig, "cannot listen on %s: %v", addr, err).
			withHint(fmt.Sprintf("port %d may be in use; pick another with --port or AGENT_PORT", cfg.Port))
	}
	cfg.Port = ln.Addr().(*net.TCPAddr).Port             // --port 0 picked one: the doctor and the page show the real one
	lim := newConnLimiter(ln, connCap(raiseFileLimit())) // /health answers even when slow clients pile up
	ln = lim
	release, err := lockHome(cfg.Home, "")
	if err != nil {
		ln.Close()
		return err
	}
	defer release()
	s, err := newServer(cfg, logger, time.Now)
	if err != nil {
		ln.Close()
		return err
	}
	s.computers.requestProofs() // every provider's trial machine, in the background (computers_proof.go)
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.streamCtx },
		ConnContext:       connContext,
		ConnState:         lim.connState,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	// SIGHUP re-reads config.yaml (main_reload.go); the server's reload goroutine ends with it. Routed
	// before the line saying the server listens: until then SIGHUP's default action ends the process,
	// and whoever waits for that line may send one at once.
	signal.Notify(s.reloads, syscall.SIGHUP)
	defer signal.Stop(s.reloads)
	fmt.Fprintf(stderr, "agentd %s listening on http://%s\n", version, ln.Addr())
	if k, ok := s.computers.providerByName("kubernetes").(*kubeProvider); ok && cfg.ComputerProvider == "kubernetes" {
		k.startNetCheck() // in the background: the doctor has the answer by the time it is asked
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		s.Close(context.Background())
		return err
	}

	// Shutdown order: streams and sockets first (they never finish on their own), then the listener and
	// in-flight requests, then the services, then the store. A fresh timeout: ctx is already done.
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s.cancelStream()
	s.hub.Close()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	<-serveErr
	closed := make(chan struct{})
	go func() { s.Close(sctx); close(closed) }()
	select {
	case <-closed:
		logger.Info("agentd stopped")
	case <-sctx.Done():
		// A service that will not stop must not hold the process: it exits now, and SQLite's WAL keeps
		// every committed write.
		logger.Warn("shutdown timed out; exiting with services still closing")
	}
	return nil
}

// newServer builds every part of the server; Close tears them down in reverse.
func newServer(cfg config, logger *slog.Logger, now func() time.Time) (*server, error) {
	st, err := openStore(filepath.Join(cfg.Home, "agentd.db"), now)
	if err != nil {
		return nil, errorf(codeConfig, "%v", err).withHint("check that AGENT_HOME is writable and not used by a newer agentd")
	}
	s := &server{
		cfg: cfg, log: logger, store: st, hub: newHub(now), idem: newIdempotencyCache(now),
		startedAt: now(), firstRun: cfg.firstRun, metrics: newMetrics(),
	}
	s.streamCtx, s.cancelStream = context.WithCancel(context.Background())
	if s.models, err = newModelService(modelDeps{hub: s.hub, log: logger, getenv: cfg.getenv, aliases: cfg.ModelAliases, metrics: s.metrics}); err != nil {
		st.Close()
		return nil, err
	}
	helper, helperNote := "", "turned off in config.yaml (execChannel: false)"
	if cfg.ExecChannel == nil || *cfg.ExecChannel {
		helper, helperNote = findHelperBinary(cfg.helperBinary)
	}
	if s.computers, err = newComputerService(computerDeps{helper: helper, helperNote: helperNote, store: st, hub: s.hub, log: logger, clock: now,
		getenv: cfg.getenv, home: cfg.Home, provider: cfg.ComputerProvider, images: cfg.Images, registries: cfg.AllowedRegistries, mountRoots: cfg.AllowedMounts,
		maxComputers: cfg.MaxComputers, reapInterval: time.Duration(cfg.ReaperIntervalSec) * time.Second,
		warmPool: cfg.WarmPool, metrics: s.metrics, kube: cfg.Kubernetes, ssh: cfg.SSH, fly: cfg.Fly}); err != nil {
		s.models.Close()
		st.Close()
		return nil, err
	}
	s.mcpClients = newMCPClients(cfg.MCPServers, logger)
	s.runs = newRunService(runDeps{store: st, hub: s.hub, models: s.models, computers: s.computers, mcp: s.mcpClients, now: now,
		log: logger, getenv: cfg.getenv, home: cfg.Home, metrics: s.metrics, defaultModel: func() string { return s.conf().Model }})
	s.sessions = newSessionService(sessionDeps{store: st, models: s.models, log: logger, now: now, getenv: cfg.getenv,
		dataDir: cfg.Home, maxCost: func() float64 { return s.conf().MaxCostUSD }, red: newRedactor(cfg.getenv)})
	s.triggers = newTriggerService(triggerDeps{store: st, hub: s.hub, log: logger, now: now, fireCron: s.fireCron,
		off: !cfg.triggersOn()})
	s.mcp = newMCPSessions(s)
	s.handler = s.routes()
	s.startReloader()
	if !cfg.noTriggers {
		s.triggers.sync(context.Background(), "", "")
	}
	return s, nil
}

// Close stops the services in a fixed order: triggers (no new runs), runs (abort and wait), computers
// (reaper; machines are left running and adopted at the next start), models, events, store.
// runServe bounds it with the shutdown timeout.
func (s *server) Close(ctx context.Context) {
	s.cancelStream()
	<-s.reloaderDone // a reload in progress finishes first
	s.triggers.Close()
	s.mcp.Close() // before runs and computers: its calls end and its machines are destroyed
	s.runs.Close()
	s.mcpClients.Close() // after the runs that used them
	s.computers.Close()
	s.models.Close()
	s.hub.Close()
	if err := s.store.Close(); err != nil {
		s.log.Warn("closing the store", "err", err)
	}
}
