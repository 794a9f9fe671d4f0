// cli_computers.go — the client commands for computers: ps, up, exec, cp, rm, stop, start, port.
//
// Entry points: the (*cli) methods named in cliCommands (cli.go); shell is in cli_shell.go.
//
// Rules (DESIGN §8): wherever an ID is taken a computer's name works too; `up` prints the full id;
// `exec ID -- CMD...` sends CMD as an argv array (use `sh -c '...'` for a shell), copies the remote
// stdout and stderr verbatim to ours and exits with the remote exit code (`exec -it` is a terminal
// session, cli_shell.go); `stop` warns when the machine's /work does not survive it (workLostOnStop); `cp` follows `docker cp`
// (`cp LOCAL ID:PATH` uploads, `cp ID:PATH LOCAL` downloads, a relative remote path is under /work,
// directories copy recursively as tar.gz). A downloaded archive is unpacked only inside the destination.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func (c *cli) ps(args []string) error {
	var all, quiet bool
	if _, err := c.flags(args, func(fs *flag.FlagSet) {
		fs.BoolVar(&all, "a", false, "")
		c.jsonFlag(fs)
		fs.BoolVar(&quiet, "q", false, "")
	}, 0, 0); err != nil {
		return err
	}
	var out struct {
		Computers []ComputerInfo `json:"computers"`
	}
	q := ""
	if all {
		q = "?all=true"
	}
	if err := c.call("GET", "/v1/computers"+q, nil, &out); err != nil {
		return err
	}
	switch {
	case c.asJSON:
		return c.printJSON(out)
	case quiet:
		for _, m := range out.Computers {
			fmt.Fprintln(c.stdout, m.ID)
		}
		return nil
	}
	now, rows := time.Now(), [][]string{}
	for _, m := range out.Computers {
		var ports []string
		for _, g := range sortedKeys(m.Ports) {
			ports = append(ports, fmt.Sprintf("%d→%s", m.Ports[g].HostPort, g))
		}
		rows = append(rows, []string{m.ID, firstNonEmpty(m.Name, "-"), m.Provider, m.State, m.Image,
			ago(m.CreatedAt, now), ago(m.LastUsedAt, now), firstNonEmpty(strings.Join(ports, ","), "-")})
	}
	c.table([]string{"ID", "NAME", "PROVIDER", "STATE", "IMAGE", "CREATED", "LAST USED", "PORTS"}, rows)
	return nil
}

func (c *cli) up(args []string) error {
	var flavor, provider, name, image, memory, disk, network string
	var cpus float64
	var persist bool
	var allow, packages listFlag
	env := kvFlag{}
	if _, err := c.flags(args, func(fs *flag.FlagSet) {
		fs.StringVar(&flavor, "flavor", "", "")
		fs.StringVar(&provider, "provider", "", "")
		fs.StringVar(&name, "name", "", "")
		fs.StringVar(&image, "image", "", "")
		c.jsonFlag(fs)
		fs.Float64Var(&cpus, "cpus", 0, "")
		fs.StringVar(&memory, "memory", "", "")
		fs.StringVar(&disk, "disk", "", "")
		fs.StringVar(&network, "network", "", "")
		fs.Var(&allow, "allow", "")
		fs.Var(&packages, "package", "")
		fs.BoolVar(&persist, "persist", false, "")
		fs.Var(env, "env", "")
	}, 0, 0); err != nil {
		return err
	}
	body := map[string]any{}
	for k, v := range map[string]string{"flavor": flavor, "provider": provider, "name": name, "image": image} {
		if v != "" {
			body[k] = v
		}
	}
	for flagName, v := range map[string]string{"memory": memory, "disk": disk} {
		if v == "" {
			continue
		}
		mb, err := parseSizeMB(v)
		if err != nil {
			return c.usage("--%s: %v", flagName, err)
		}
		body[flagName+"Mb"] = mb
	}
	if cpus != 0 {
		body["cpus"] = cpus
	}
	if network != "" || len(allow) > 0 {
		switch network {
		case "", "none", "egress", "full":
		default:
			return c.usage("--network takes none, egress or full, not %q", network)
		}
		nw := map[string]any{}
		if network != "" {
			nw["mode"] = network
		}
		if len(allow) > 0 {
			nw["allow"] = allow
		}
		body["network"] = nw
	}
	if len(packages) > 0 {
		body["packages"] = packages
	}
	if persist {
		body["persist"] = true
	}
	if len(env) > 0 {
		body["env"] = env
	}
	c.progress("creating a computer…")
	var m ComputerInfo
	if err := c.call("POST", "/v1/computers", body, &m); err != nil {
		return err
	}
	if c.asJSON {
		return c.printJSON(m)
	}
	fmt.Fprintln(c.stdout, m.ID)
	return nil
}

func (c *cli) exec(args []string) error {
	var interactive, tty bool
	var cwd, timeout string
	env := kvFlag{}
	for i, a := range args { // -it and -ti, as docker spells them
		if a == "--" {
			break
		}
		if a == "-it" || a == "-ti" {
			args = append(append(args[:i:i], "-i", "-t"), args[i+1:]...)
			break
		}
	}
	pos, err := c.flags(args, func(fs *flag.FlagSet) {
		fs.BoolVar(&interactive, "i", false, "")
		fs.BoolVar(&tty, "t", false, "")
		fs.StringVar(&cwd, "cwd", "", "")
		fs.Var(env, "env", "")
		fs.StringVar(&timeout, "timeout", "", "")
	}, 2, -1)
	if err != nil {
		return err
	}
	if tty {
		if cwd != "" || len(env) > 0 || timeout != "" {
			return c.usage("--cwd, --env and --timeout are for exec without -t (a terminal's command runs as typed)")
		}
		return c.execTTY(pos[0], pos[1:], interactive)
	}
	body := map[string]any{"cmd": pos[1:]}
	if cwd != "" {
		body["cwd"] = cwd
	}
	if len(env) > 0 {
		body["env"] = env
	}
	if timeout != "" {
		sec, err := parseSeconds(timeout)
		if err != nil {
			return c.usage("--timeout: %v", err)
		}
		body["timeoutSec"] = sec
	}
	if interactive {
		b, err := io.ReadAll(c.stdin)
		if err != nil {
			return err
		}
		body["stdin"] = string(b)
	}
	code := -1
	_, err = c.stream("POST", "/v1/computers/"+url.PathEscape(pos[0])+"/exec/stream", body, func(ev cliEvent) error {
		var f struct {
			Type   string      `json:"type"`
			Data   string      `json:"data"`
			Result *ExecResult `json:"result"`
		}
		json.Unmarshal(ev.data, &f)
		switch f.Type {
		case "stdout":
			io.WriteString(c.stdout, f.Data)
		case "stderr":
			io.WriteString(c.stderr, f.Data)
		case "exit":
			code = f.Result.ExitCode
			if f.Result.TimedOut {
				fmt.Fprintln(c.stderr, "agentd: the command timed out")
			}
		}
		return nil
	})
	if err != nil {
		if c.ctx.Err() != nil {
			return c.ctx.Err()
		}
		return err
	}
	if code < 0 {
		return errors.New("the exec stream ended without an exit code")
	}
	if code != 0 {
		return exitCode{code: code}
	}
	return nil
}

// eachComputer makes one lifecycle call per id, printing each id done; with --json (stop, start: the API
// answers a ComputerInfo) it prints each answer instead, one JSON object per line.
func (c *cli) eachComputer(args []string, method, suffix string, withJSON bool) error {
	ids, err := c.flags(args, func(fs *flag.FlagSet) {
		if withJSON {
			c.jsonFlag(fs)
		}
	}, 1, -1)
	if err != nil {
		return err
	}
	for _, id := range ids {
		var out json.RawMessage
		var into any
		if withJSON { // stop and start answer the machine
			into = &out
		}
		if err := c.call(method, "/v1/computers/"+url.PathEscape(id)+suffix, nil, into); err != nil {
			return err
		}
		var m ComputerInfo
		if suffix == "/stop" && json.Unmarshal(out, &m) == nil && workLostOnStop(m) {
			fmt.Fprintf(c.stderr, "agentd: %s: its /work was in memory (persist: false) and is now empty: `agentd start` gives it back empty; create machines with persist: true to keep files across a stop\n", id)
		}
		if !c.asJSON {
			fmt.Fprintln(c.stdout, id)
			continue
		}
		var line bytes.Buffer
		if err := json.Compact(&line, out); err != nil {
			return fmt.Errorf("the server's answer is not JSON: %v", err)
		}
		fmt.Fprintf(c.stdout, "%s\n", line.Bytes())
	}
	return nil
}

// workLostOnStop: docker and podman keep a non-persistent machine's /work in a tmpfs, and kubernetes in
// the pod a stop deletes; the sandbox and local keep it in a host directory.
func workLostOnStop(m ComputerInfo) bool {
	return !m.Spec.Persist && (m.Provider == "docker" || m.Provider == "podman" || m.Provider == "kubernetes")
}

func (c *cli) rm(args []string) error    { return c.eachComputer(args, "DELETE", "", false) }
func (c *cli) stop(args []string) error  { return c.eachComputer(args, "POST", "/stop", true) }
func (c *cli) start(args []string) error { return c.eachComputer(args, "POST", "/start", true) }

func (c *cli) port(args []string) error {
	pos, err := c.flags(args, c.jsonFlag, 2, 2)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(pos[1])
	if err != nil {
		return c.usage("PORT %q is not a number", pos[1])
	}
	var pb map[string]any // printed unchanged with --json
	if err := c.call("POST", "/v1/computers/"+url.PathEscape(pos[0])+"/ports", map[string]any{"port": port}, &pb); err != nil {
		return err
	}
	if c.asJSON {
		return c.printJSON(pb)
	}
	fmt.Fprintln(c.stdout, pb["url"])
	return nil
}

// ---- cp ----

// remotePath splits ID:/path; ok is false for a local path.
func remotePath(s string) (id, p string, ok bool) {
	id, p, found := strings.Cut(s, ":")
	if !found || id == "" || strings.Contains(id, "/") { // ./a:b is a local file
		return "", "", false
	}
	if !strings.HasPrefix(p, "/") {
		p = "/work/" + p
	}
	return id, path.Clean(p), true
}

func (c *cli) cp(args []string) error {
	pos, err := c.flags(args, func(fs *flag.FlagSet) {}, 2, 2)
	if err != nil {
		return err
	}
	srcID, srcPath, srcRemote := remotePath(pos[0])
	dstID, dstPath, dstRemote := remotePath(pos[1])
	switch {
	case srcRemote == dstRemote:
		return c.usage("one side must be ID:PATH and the other a local path")
	case dstRemote:
		return c.upload(pos[0], dstID, dstPath)
	default:
		return c.download(srcID, srcPath, pos[1])
	}
}

// remoteIsDir reports whether a remote path is an existing directory.
func (c *cli) remoteIsDir(id, p string) bool {
	return c.call("GET", "/v1/computers/"+url.PathEscape(id)+"/fs"+queryOf("path", p), nil, nil) == nil
}

func (c *cli) upload(local, id, dst string) error {
	if _, err := os.Stat(local); err != nil {
		return err
	}
	// docker cp: into an existing directory under the source's name, else as dst itself.
	dir, top := dst, filepath.Base(filepath.Clean(local))
	if !c.remoteIsDir(id, dst) {
		dir, top = path.Dir(dst), path.Base(dst)
	}
	var archive bytes.Buffer
	clean := filepath.Clean(local)
	if err := tarTo(c.ctx, &archive, os.DirFS(filepath.Dir(clean)), filepath.Base(clean), top); err != nil {
		return err
	}
	var out map[string]any
	if err := c.call("POST", "/v1/computers/"+url.PathEscape(id)+"/fs/upload"+queryOf("path", dir), archive.Bytes(), &out); err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "copied %v entries to %s:%s\n", out["entries"], id, path.Join(dir, top))
	return nil
}

func (c *cli) download(id, src, local string) error {
	resp, err := c.send(c.ctx, "GET", "/v1/computers/"+url.PathEscape(id)+"/fs/download"+queryOf("path", src), nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// docker cp: into an existing directory under the source's name, else as local itself.
	dir, rename := local, ""
	if fi, err := os.Stat(local); err != nil || !fi.IsDir() {
		dir, rename = filepath.Dir(local), filepath.Base(local)
	}
	n, err := untarLocal(resp.Body, dir, path.Base(src), rename)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "copied %d entries from %s:%s\n", n, id, src)
	return nil
}

// untarLocal unpacks a download under dir with the server's extractor (untarTo). Entries start with top
// (the remote name); with rename set, top becomes rename.
func untarLocal(r io.Reader, dir, top, rename string) (int, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	var to func(string) string
	if rename != "" {
		to = func(name string) string {
			if name == top || strings.HasPrefix(name, top+"/") {
				return rename + strings.TrimPrefix(name, top)
			}
			return name
		}
	}
	n, err := untarTo(root, r, to)
	if err != nil {
		return n, fmt.Errorf("the download: %w", err)
	}
	return n, nil
}
