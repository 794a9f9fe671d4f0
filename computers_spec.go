// computers_spec.go — what a machine's spec may ask of this host, checked before anything starts.
//
// Entry points: applyComputerDefaults (the contract's defaults), checkEngineArgs (what reaches an engine's
// argv), imageFor / machineImage (the flavor's image), checkHostLimits (memory, disk, registries), checkHostCPUs,
// checkMountSource (allowedMounts and the never-mountable paths), openMountSources (the same, again at
// every start, on sources opened without following a link), checkMountTarget (the reserved targets, also
// used by spec validation). Every refusal is a 422 naming the field; a NUL in any value that reaches an
// argv or an environment is one too (issue 25).
package main

import (
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
)

var computerNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$`)

// applyComputerDefaults fills the contract's defaults (DESIGN §4, docs/API.md computer table).
func applyComputerDefaults(sp *ComputerSpec) {
	if sp.Flavor == "" {
		sp.Flavor = "base"
	}
	if sp.CPUs == 0 {
		sp.CPUs = 2
	}
	if sp.MemoryMB == 0 {
		sp.MemoryMB = 2048
	}
	if sp.DiskMB == 0 {
		sp.DiskMB = 2048
	}
	if sp.Workdir == "" {
		sp.Workdir = "/work"
	} else if strings.HasPrefix(sp.Workdir, "/") {
		// `/work/../..` must be judged (and mapped) as where it lands, not as it is spelled.
		sp.Workdir = path.Clean(sp.Workdir)
	}
	if sp.Network.Mode == "" {
		sp.Network.Mode = "egress"
	}
	if sp.Env == nil {
		sp.Env = map[string]string{}
	}
	if sp.Packages == nil {
		sp.Packages = []string{}
	}
	if sp.Mounts == nil {
		sp.Mounts = []Mount{}
	}
}

var imageRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._/:@+-]*$`)

// checkEngineArgs refuses values that would be read as engine flags or break the argv: the spec also
// arrives from agent specs, not only from the strict create body.
func checkEngineArgs(sp ComputerSpec, image string) error {
	bad := func(field, v string) error {
		return errorf(codeSpecInvalid, "%s: invalid value %q", field, v).withHint("fix the computer spec")
	}
	if image != "" && !imageRE.MatchString(image) {
		return bad("image", image)
	}
	if !strings.HasPrefix(sp.Workdir, "/") || strings.ContainsAny(sp.Workdir, "\x00\n:") {
		return bad("workdir", sp.Workdir)
	}
	if strings.HasPrefix(sp.User, "-") {
		return bad("user", sp.User)
	}
	for i, m := range sp.Mounts {
		if !strings.HasPrefix(m.Source, "/") || strings.Contains(m.Source, ":") {
			return bad(fmt.Sprintf("mounts.%d.source", i), m.Source)
		}
		if err := checkMountTarget(m.Target); err != nil {
			return errorf(codeSpecInvalid, "mounts.%d.target: %s", i, err.Error()).
				withHint("mount below /work or at a directory of your own, e.g. /work/data or /data")
		}
	}
	// Every value that reaches an engine's or a process's argv or environment: a NUL cannot be passed
	// (the kernel's strings end there), so it is the caller's mistake, not the engine's 500.
	nul := func(field, v string) error {
		if strings.IndexByte(v, 0) < 0 {
			return nil
		}
		return errorf(codeSpecInvalid, "%s: contains a NUL byte", field).withHint("remove the NUL byte")
	}
	fields := map[string]string{"name": sp.Name, "user": sp.User, "setup": sp.Setup, "provider": sp.Provider}
	for i, m := range sp.Mounts {
		fields[fmt.Sprintf("mounts.%d.source", i)] = m.Source
	}
	for k, v := range sp.Env {
		fields["env."+k] = k + v
	}
	for k, v := range sp.Labels {
		fields["labels."+k] = k + v
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if err := nul(strings.ReplaceAll(k, "\x00", `\0`), fields[k]); err != nil {
			return err
		}
	}
	return nil
}

// Mount targets (DESIGN §4 leaves them open): a mount may not cover what the machine needs from agentd,
// the kernel or its own image. Never: the root; /work, /tmp and /run themselves (agentd mounts them; below
// them is fine); the kernel's /proc, /sys and /dev and anything below (the engine mounts them, and a mount
// there can reach the host); /.agentd and below (agentd's helper and exec channel); /etc itself and the
// files the engine writes there (hosts, hostname, resolv.conf); the userland roots /bin, /sbin, /lib*,
// /usr (the machine's users and shell live there). Below /etc or /usr is fine (/etc/myapp, /usr/local/x).
var (
	mountTargetExact   = []string{"/", "/work", "/tmp", "/run", "/etc", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr"}
	mountTargetSubtree = []string{"/proc", "/sys", "/dev", "/.agentd"}
)

// checkMountTarget judges a mount target as it resolves (`/work/../etc` is /etc): nil or why not.
func checkMountTarget(target string) error {
	if !strings.HasPrefix(target, "/") {
		return fmt.Errorf("must be an absolute path inside the machine")
	}
	if strings.ContainsAny(target, ":\x00\n\r") {
		return fmt.Errorf("must not contain ':' or control characters")
	}
	t := path.Clean(target)
	if slices.Contains(mountTargetExact, t) {
		return fmt.Errorf("%s is reserved: the machine needs its own (the reserved targets are /, /work, /tmp, /run, /etc, /bin, /sbin, /lib*, /usr, and anything under /proc, /sys, /dev and /.agentd)", t)
	}
	for _, r := range mountTargetSubtree {
		if t == r || strings.HasPrefix(t, r+"/") {
			return fmt.Errorf("%s is reserved: %s belongs to the kernel or to agentd (the reserved targets are /, /work, /tmp, /run, /etc, /bin, /sbin, /lib*, /usr, and anything under /proc, /sys, /dev and /.agentd)", t, r)
		}
	}
	return nil
}

// defaultImages are the flavor images of DESIGN §4; config `images` overrides them.
// They are fully qualified so podman, which refuses ambiguous short names, pulls them too.
var defaultImages = map[string]string{
	"base": "docker.io/library/debian:bookworm-slim", "python": "docker.io/library/python:3.12-slim",
	"node": "docker.io/library/node:22-slim", "full": "docker.io/library/debian:bookworm",
	// browser (issue 28): Debian's chromium on bookworm, built offline by scripts/test-image.sh --flavor
	// browser; no registry has it, so it is local to the engine (on local and sandbox: the host's chromium).
	"browser": "agentd-test:browser",
}

// flavors are the names computer.flavor accepts, in the order messages list them.
var flavors = []string{"base", "python", "node", "full", "browser"}

func (c *computerService) imageFor(sp ComputerSpec) string {
	if sp.Image != "" {
		return sp.Image
	}
	if img := c.conf().images[sp.Flavor]; img != "" {
		return img
	}
	return defaultImages[sp.Flavor]
}

// machineImage is the image a machine of sp runs on p: none on local and sandbox (the host's userland).
func (c *computerService) machineImage(p provider, sp ComputerSpec) string {
	if _, sandbox := p.(*sandboxProvider); !p.meta().isolated || sandbox || p.meta().isolationKind == "machine" { // ssh: the host's system
		return ""
	}
	return c.imageFor(sp)
}

// Limits of this host that a valid spec can still exceed: each a 422 naming the limit, never an engine's 500.
const (
	minMachineMemoryMB = 64      // below this a container cannot start its init and shell
	maxMachineDiskMB   = 1 << 20 // 1 TB of tmpfs or volume
)

// checkHostCPUs refuses more cpus than this host has, on a provider whose machines run on this host:
// judged after the provider is selected (a spec may name none, and `auto` may select kubernetes, where
// the node decides: an unschedulable request fails with the pod's events).
func checkHostCPUs(sp ComputerSpec, p provider) error {
	switch p.(type) {
	case *kubeProvider, *flyProvider: // machines on other hosts
		return nil
	}
	if sp.CPUs <= float64(runtime.NumCPU()) {
		return nil
	}
	return errorf(codeSpecInvalid, "cpus: %g is more than this host's %d CPUs", sp.CPUs, runtime.NumCPU()).
		withHint(fmt.Sprintf("ask for at most %d", runtime.NumCPU())).withDetail("limit", runtime.NumCPU())
}

// checkHostLimits refuses what this host cannot give whatever the provider, and images from registries
// not allowed (cpus: checkHostCPUs, once the provider is known).
func (c *computerService) checkHostLimits(sp ComputerSpec) error {
	switch {
	case sp.MemoryMB < minMachineMemoryMB:
		return errorf(codeSpecInvalid, "memoryMb: %d MB is below the %d MB a machine needs", sp.MemoryMB, minMachineMemoryMB).
			withHint(fmt.Sprintf("ask for at least %d", minMachineMemoryMB)).withDetail("limit", minMachineMemoryMB)
	case sp.DiskMB > maxMachineDiskMB:
		return errorf(codeSpecInvalid, "diskMb: %d MB is above the %d MB ceiling", sp.DiskMB, maxMachineDiskMB).
			withHint(fmt.Sprintf("ask for at most %d", maxMachineDiskMB)).withDetail("limit", maxMachineDiskMB)
	}
	ms, err := c.openMountSources(sp)
	if err != nil {
		return err
	}
	closeMountSources(ms)
	if img := c.imageFor(sp); sp.Image != "" {
		if reg := imageRegistry(img); !slices.Contains(c.allowedRegistries(), reg) {
			return errorf(codeSpecInvalid, "image: %s is from registry %s, which this server does not pull from", img, reg).
				withHint("use an image from "+strings.Join(c.allowedRegistries(), ", ")+", or add the registry to allowedRegistries in config.yaml, "+takesEffect("allowedRegistries")).
				withDetail("allowedRegistries", c.allowedRegistries())
		}
	}
	return nil
}

// checkMountSource allows a host directory into a machine only under allowedMounts, and never what
// would hand the machine the host: the root, /proc, /sys, /dev, /boot, /run (the engines' sockets live
// there), any socket, or the data directory or a directory holding it. The source is judged as it
// resolves, so a symlink to the Docker socket is the Docker socket.
func (c *computerService) checkMountSource(src string) error {
	real := filepath.Clean(src)
	if r, err := resolveExisting(real); err == nil { // a missing tail under a link still lands where the link goes
		real = r
	}
	if fi, err := os.Stat(real); err == nil && fi.Mode()&os.ModeSocket != 0 {
		return fmt.Errorf("%s is a socket (an engine's socket would hand the machine the host)", src)
	}
	under := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") }
	if real == "/" {
		return fmt.Errorf("the host's root is never mounted")
	}
	for _, sys := range []string{"/proc", "/sys", "/dev", "/boot", "/run", "/var/run"} {
		if under(real, sys) {
			return fmt.Errorf("%s is under %s, which is never mounted", src, sys)
		}
	}
	if home, err := filepath.Abs(c.home); err == nil && c.home != "" {
		if rh, err := filepath.EvalSymlinks(home); err == nil {
			home = rh
		}
		if under(real, home) || under(home, real) {
			return fmt.Errorf("%s holds or is inside agentd's data directory", src)
		}
	}
	for _, root := range c.conf().mountRoots {
		if r, err := filepath.EvalSymlinks(filepath.Clean(root)); err == nil {
			root = r
		}
		if under(real, filepath.Clean(root)) {
			return nil
		}
	}
	return fmt.Errorf("%s is not under a directory in allowedMounts", src)
}

// mountSource is one mount's source as opened for a (re)start: the object to mount, and its identity.
type mountSource struct {
	f        *os.File // opened without following any link (openNoFollow); an O_PATH descriptor on Linux
	dev, ino uint64
}

// openMountSources judges and opens every mount source of sp, at create and again at every start of
// every provider (a machine with a read-write mount can replace a directory mounted elsewhere by a
// symlink, e.g. `rmdir /data/sub && ln -s / /data/sub`, and an engine resolves its -v source again at
// each start). Each source is walked component by component from / without following a link: a
// symlink anywhere in it is refused, so the path opened is the path judged by checkMountSource, and
// the descriptor is what the machine gets (the sandbox binds it: --bind-fd) or what the engine must
// have mounted (docker and podman: verifyMounts compares device and inode). The caller closes them.
func (c *computerService) openMountSources(sp ComputerSpec) ([]mountSource, error) {
	var out []mountSource
	for i, m := range sp.Mounts {
		src := filepath.Clean(m.Source)
		fail := func(err error) ([]mountSource, error) {
			closeMountSources(out)
			return nil, errorf(codeSpecInvalid, "mounts.%d.source: %s", i, err.Error()).
				withHint("mount a directory under one listed in allowedMounts in config.yaml (now: "+listOrNone(c.conf().mountRoots)+"; "+takesEffect("allowedMounts")+"), named by its real path (no symlink in it), or copy files in with the upload endpoint").
				withDetail("allowedMounts", c.conf().mountRoots)
		}
		if err := c.checkMountSource(src); err != nil {
			return fail(err)
		}
		f, err := openNoFollow(src)
		if err != nil {
			return fail(err)
		}
		dev, ino, mode, err := fileID(f)
		if err != nil {
			f.Close()
			return fail(err)
		}
		if !mode.IsDir() && !mode.IsRegular() {
			f.Close()
			return fail(fmt.Errorf("%s is neither a directory nor a regular file", src))
		}
		out = append(out, mountSource{f: f, dev: dev, ino: ino})
	}
	return out, nil
}

func closeMountSources(ms []mountSource) {
	for _, m := range ms {
		m.f.Close()
	}
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

// imageRegistry is an image reference's registry: its first component when that names a host
// (a dot, a port, or localhost), else Docker Hub.
func imageRegistry(ref string) string {
	first, rest, found := strings.Cut(ref, "/")
	if found && rest != "" && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return strings.ToLower(first)
	}
	return "docker.io"
}

// allowedRegistries: config's allowedRegistries, else the registries of the flavor images in use.
func (c *computerService) allowedRegistries() []string {
	if r := c.conf().registries; len(r) > 0 {
		return r
	}
	var out []string
	for _, f := range flavors {
		if r := imageRegistry(c.imageFor(ComputerSpec{Flavor: f})); !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}
