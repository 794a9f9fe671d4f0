// doctor.go — the capability report (GET /v1/doctor, later `agentd doctor --json`).
//
// Rules (docs/API.md DoctorReport, DESIGN §8): `node` holds the Go runtime version because the contract names the
// field so; `platform` is GOOS/GOARCH; `host` (an addition) says what that OS offers (hostOffers); `firstRun` is true when this start created the data directory;
// warnings are honest: the computer and model services add theirs, this file adds a token-less server and a
// data directory on a full disk. `?force` is accepted and ignored.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"time"
)

// DoctorReport is the one shape of GET /v1/doctor and `agentd doctor --json`.
type DoctorReport struct {
	Version   string                `json:"version"`
	Node      string                `json:"node"`
	Platform  string                `json:"platform"`
	AgentHome string                `json:"agentHome"`
	FirstRun  bool                  `json:"firstRun"`
	Providers []doctorProvider      `json:"providers"`
	Models    []doctorModelProvider `json:"models"`
	Selection doctorSelection       `json:"selection"`
	Images    []doctorImage         `json:"images"`     // addition: each flavor's image on the selected engine
	Pool      doctorPool            `json:"pool"`       // addition: the warm pool (computers_pool.go)
	Browser   doctorBrowser         `json:"browser"`    // addition: Chromium for the machines (computers_browser.go)
	MCP       []map[string]any      `json:"mcpServers"` // addition: config.yaml's MCP servers and their state (mcp_client.go)
	Host      doctorHost            `json:"host"`       // addition: what this host's OS offers, configured or not (hostOffers)
	Warnings  []string              `json:"warnings"`
}

// doctorImage is a flavor's image and whether the selected engine has it locally (no pull needed).
type doctorImage struct {
	Flavor   string `json:"flavor"`
	Image    string `json:"image"`
	Provider string `json:"provider"`
	Present  bool   `json:"present"`
}

// doctorPool is the warm pool (computers_pool.go): enabled with its engine, or the reason it is off;
// per configured flavor the target and how many machines are ready; the last failed fill, if any.
type doctorPool struct {
	Enabled   bool               `json:"enabled"`
	Provider  string             `json:"provider,omitempty"`
	Reason    string             `json:"reason,omitempty"`
	LastError string             `json:"lastError,omitempty"`
	Flavors   []doctorPoolFlavor `json:"flavors"`
}

type doctorPoolFlavor struct {
	Flavor   string   `json:"flavor"`
	Target   int      `json:"target"`
	Ready    int      `json:"ready"`
	Provider string   `json:"provider"`
	Machines []string `json:"machines"` // ids of the ready machines, oldest (next taken) first
}

// doctorProvider is one computer provider in the doctor report.
type doctorProvider struct {
	Name          string `json:"name"`
	Description   string `json:"description"`
	Priority      int    `json:"priority"`
	Available     bool   `json:"available"`
	Isolated      bool   `json:"isolated"`
	IsolationKind string `json:"isolationKind"`
	Version       string `json:"version,omitempty"`
	Reason        string `json:"reason,omitempty"`
	Hint          string `json:"hint,omitempty"`
	// Proof (addition): what `available` rests on, a trial machine started and a command run in it, and
	// when (computers_proof.go); available is never true without one.
	Proof string `json:"proof,omitempty"`
	// ExecChannel (addition, docker and podman): whether execs and file operations go over the warm
	// in-machine channel, and why not (or what limits it).
	ExecChannel *doctorExecChannel `json:"execChannel,omitempty"`
	// NetworkPolicies (addition, kubernetes): whether the cluster's network plugin was shown to enforce
	// them (computers_kubernetes_netcheck.go): "enforced: …", "not enforced: …", "being checked", "not shown: …".
	NetworkPolicies string `json:"networkPolicies,omitempty"`
	// Limits (addition, sandbox): which limits bind a machine on this host, cgroups or rlimits alone, and why.
	Limits string `json:"limits,omitempty"`
}

// doctorModelProvider is one model provider in the doctor report.
type doctorExecChannel struct {
	Enabled bool   `json:"enabled"`
	Reason  string `json:"reason,omitempty"`
}

type doctorModelProvider struct {
	ID          string   `json:"id"`
	DisplayName string   `json:"displayName"`
	Priority    int      `json:"priority"`
	Available   bool     `json:"available"`
	EnvKey      string   `json:"envKey"`
	Models      []string `json:"models"` // at most 12, only from providers that answered
	Reason      string   `json:"reason,omitempty"`
	Hint        string   `json:"hint,omitempty"`
}

// doctorSelection is what the server would pick, with the reason for each choice.
type doctorSelection struct {
	Provider       string `json:"provider"`
	ProviderReason string `json:"providerReason"`
	Isolated       bool   `json:"isolated"`
	Model          string `json:"model"`
	ModelReason    string `json:"modelReason"`
}

// Disk thresholds for the full-disk warning: either is enough.
const (
	diskLowBytes   = 512 << 20
	diskLowPercent = 2.0
	doctorTimeout  = 15 * time.Second
)

func (s *server) handleDoctor(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), doctorTimeout)
	defer cancel()
	s.computers.startBackgroundChecks(ctx) // what the report says once they end (never waited for here)
	writeJSON(w, http.StatusOK, s.doctor(ctx))
	return nil
}

// doctor builds the report. The computer and model services report their own providers and warnings.
func (s *server) doctor(ctx context.Context) DoctorReport {
	rep := DoctorReport{
		Version: version, Node: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		AgentHome: s.cfg.Home, FirstRun: s.firstRun, Warnings: []string{}, Host: hostOffers(runtime.GOOS),
	}
	providers, sel, images, cw := s.computers.doctor(ctx)
	rep.Images = images
	rep.Browser = s.computers.browserDoctor(images)
	var pw []string
	rep.Pool, pw = s.computers.poolDoctor(ctx) // the warm pool: per flavor ready/target, or why it is off
	cw = append(cw, pw...)
	models, model, reason, mw := s.models.doctor(ctx)
	rep.Providers, rep.Models, rep.Selection = providers, models, sel
	rep.Selection.Model, rep.Selection.ModelReason = model, reason
	if rep.Providers == nil {
		rep.Providers = []doctorProvider{}
	}
	if rep.Models == nil {
		rep.Models = []doctorModelProvider{}
	}
	rep.Warnings = append(rep.Warnings, cw...)
	rep.Warnings = append(rep.Warnings, mw...)
	rep.MCP = s.mcpClients.doctor()
	if s.cfg.Token != "" && len(s.cfg.Token) < minTokenLen {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("AGENT_TOKEN has %d characters: use at least %d (openssl rand -hex 24)", len(s.cfg.Token), minTokenLen))
	}
	if s.cfg.Token == "" {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("no AGENT_TOKEN is set: any program on this machine that can reach %s can run shell commands through the API; set AGENT_TOKEN to require a bearer token",
			net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port))))
	}
	if w := diskWarning(s.cfg.Home, s.diskFree); w != "" {
		rep.Warnings = append(rep.Warnings, w)
	}
	return rep
}

// diskWarning reports a data directory on a (nearly) full disk; free is injectable for tests.
func diskWarning(dir string, free func(string) (avail, total uint64, err error)) string {
	if free == nil {
		free = diskFree
	}
	avail, total, err := free(dir)
	if err != nil {
		return fmt.Sprintf("cannot read the free space of the data directory %s: %v", dir, err)
	}
	if total == 0 {
		return "" // unknown on this platform
	}
	pct := float64(avail) * 100 / float64(total)
	if avail < diskLowBytes || pct < diskLowPercent {
		return fmt.Sprintf("the data directory %s is on a full disk: %d MB free (%.1f%%); writes of agents and runs may fail", dir, avail>>20, pct)
	}
	return ""
}

// doctorHost (addition, issue 29) is what this host's operating system offers, provider by provider,
// whether configured or not (the report's providers are those this server has): how each runs here, or
// why it cannot. A table of what agentd does on each OS (hostOffers), so it can be tested for all of them.
type doctorHost struct {
	OS     string            `json:"os"`
	Offers []doctorHostOffer `json:"offers"`
}

type doctorHostOffer struct {
	Provider string `json:"provider"`
	Offered  bool   `json:"offered"`
	How      string `json:"how"` // how it runs on this OS, or why it does not
}

// The local provider's refusal on Windows (platform_windows.go's localHostRefusal says it at probe).
const (
	localWindowsReason = "the local provider needs a POSIX shell and process groups, which Windows does not have"
	localWindowsHint   = "use provider docker or podman (Docker Desktop or Podman on Windows), or ssh to a Linux box"
)

// hostOffers is what an agentd built for goos offers.
func hostOffers(goos string) doctorHost {
	linux := goos == "linux"
	engine := "the engine's CLI"
	channel := "execs and files over the in-machine exec channel (agentd's own binary as the helper)"
	if !linux {
		engine = map[string]string{"darwin": "Docker Desktop's or Podman machine's CLI", "windows": "Docker Desktop's or Podman's CLI"}[goos]
		if engine == "" {
			engine = "the engine's CLI"
		}
		channel = "every exec takes the per-call path (agentd is not a Linux executable here, so it cannot be the machines' helper)"
	}
	h := doctorHost{OS: goos}
	add := func(p string, ok bool, how string) {
		h.Offers = append(h.Offers, doctorHostOffer{Provider: p, Offered: ok, How: how})
	}
	add("docker", true, engine+"; "+channel)
	add("podman", true, engine+"; "+channel)
	switch goos {
	case "linux":
		add("sandbox", true, "bubblewrap: Linux namespaces, cgroups where delegated")
	default:
		add("sandbox", false, "the sandbox needs Linux namespaces")
	}
	switch goos {
	case "windows":
		add("local", false, localWindowsReason+"; "+localWindowsHint)
	case "linux":
		add("local", true, "a guarded directory on this host, not isolated")
	default:
		add("local", true, "a guarded directory on this host, not isolated; leftover processes of a previous server are not found (no /proc)")
	}
	switch goos {
	case "windows":
		add("ssh", true, "the system ssh client without multiplexing (Windows' OpenSSH has no ControlMaster): a connection per call, an ssh -N -L per forwarded port (ssh.multiplex: false is the default here)")
	default:
		add("ssh", true, "the system ssh client, one ControlMaster connection per machine (ssh.multiplex: false for a connection per call)")
	}
	add("kubernetes", true, "kubectl against the configured cluster")
	add("fly", true, "Fly's Machines API over HTTPS (FLY_API_TOKEN)")
	return h
}
