// computers_sandbox_cgroup.go — a cgroup per sandbox machine, where this host lets agentd write one:
// memoryMb, cpus and a task bound the kernel enforces for the whole machine, not per process.
//
// Entry points: detectCgroups (at probe: which hierarchy, where, or why none), cgroupHost.create (before
// a machine's bwrap starts; startHelper moves bwrap's child into it),
// cgroupHost.remove (stop, destroy, before a reopen), cgroupHost.sweep (reconcile), cgroupHost.note (the
// doctor).
//
// Rules: as root, on cgroup v1 (memory and pids mounted; cpu when mounted) and on v2 (memory and pids in
// the root's controllers), a machine's cgroup is <hierarchy>/agentd/agentd-<owner>-<id>, as docker's
// cgroupfs driver keeps /docker/<id>: beside, not under, the cgroup agentd itself runs in. Without root,
// only a delegated v2 subtree serves: agentd's own cgroup, writable and holding no other process than
// agentd, which moves itself into a leaf, <own>/agentd-serve, so that its cgroup may enable controllers
// for its children (v2's no-internal-processes rule; what systemd's Delegate=yes asks a service to do);
// the machines are then <own>/agentd-<owner>-<id>. Limits: memory (and memory+swap: no swap beyond it)
// memoryMb, pids sandboxNproc tasks (threads count), CPU bandwidth cpus × 100 ms per 100 ms. The
// machine's first process is moved into its cgroup before it forks anything (bwrap's --block-fd:
// startHelper, computers_sandbox_userns.go), so every process of the machine is born in it. The
// cgroup is removed (what is left in it killed first) at stop, destroy, shutdown and before the
// machine's bwrap starts again; reconcile removes those of this owner whose machine is gone. Anywhere else the sandbox
// keeps its rlimits and watchdog alone, and the doctor says which applies and why.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	cgroupServeLeaf = "agentd-serve" // where agentd moves itself in a delegated v2 subtree
	cgroupCPUPeriod = 100000         // µs: the CPU bandwidth period
)

// cgroupHost is where this server's machines' cgroups go (fixed at probe).
type cgroupHost struct {
	version int    // 1 or 2; 0: no cgroups (why says why)
	why     string // why not, for the doctor
	// parents: v1, controller → the directory machines' cgroups go under (one per hierarchy; a
	// co-mounted hierarchy appears under each of its controllers); v2, "" → that directory.
	parents map[string]string
	cpu     bool   // the cpu controller is there: cpus is enforced
	owner   string // this server's owner id: its machines' cgroups are agentd-<owner>-<id>
}

// cgroupEnv is what detection reads, so the tests can point it at a tree of their own.
type cgroupEnv struct {
	euid       int
	pid        int
	selfCgroup string // /proc/self/cgroup
	mountinfo  string // /proc/self/mountinfo
}

func hostCgroupEnv() cgroupEnv {
	cg, _ := os.ReadFile("/proc/self/cgroup")
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	return cgroupEnv{euid: os.Geteuid(), pid: os.Getpid(), selfCgroup: string(cg), mountinfo: string(mi)}
}

// cgroupMount is one cgroup filesystem of mountinfo.
type cgroupMount struct {
	root, point string
	v2          bool
	controllers []string // v1: the super options that name controllers
}

func parseCgroupMounts(mountinfo string) []cgroupMount {
	var out []cgroupMount
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		switch g[0] {
		case "cgroup2":
			out = append(out, cgroupMount{root: f[3], point: unescapeMount(f[4]), v2: true})
		case "cgroup":
			out = append(out, cgroupMount{root: f[3], point: unescapeMount(f[4]), controllers: strings.Split(g[2], ",")})
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readTrim(p string) string { b, _ := os.ReadFile(p); return strings.TrimSpace(string(b)) }

// detectCgroups finds where this server's machines' cgroups can go, or says why nowhere. In a
// delegated v2 subtree it moves agentd into its leaf (once: a later probe finds it there).
func detectCgroups(env cgroupEnv, owner string) cgroupHost {
	h := cgroupHost{owner: owner}
	mounts := parseCgroupMounts(env.mountinfo)
	var v2 *cgroupMount
	for i := range mounts {
		if mounts[i].v2 {
			v2 = &mounts[i]
		}
	}
	// v2 first, when it holds the controllers (on a hybrid host they are v1's and v2 holds none).
	if v2 != nil && hasControllers(readTrim(filepath.Join(v2.point, "cgroup.controllers")), "memory", "pids") {
		if env.euid == 0 {
			return h.v2At(filepath.Join(v2.point, "agentd"), v2.point)
		}
		return h.v2Delegated(env, *v2)
	}
	if env.euid != 0 {
		return cgroupHost{why: "cgroup v1 needs root, and no delegated cgroup v2 subtree holds the memory and pids controllers"}
	}
	h.parents = map[string]string{}
	for _, c := range []string{"memory", "pids", "cpu"} {
		for _, m := range mounts {
			if !m.v2 && slices.Contains(m.controllers, c) {
				h.parents[c] = filepath.Join(m.point, "agentd")
				break
			}
		}
	}
	if h.parents["memory"] == "" || h.parents["pids"] == "" {
		return cgroupHost{why: "neither cgroup v2 with the memory and pids controllers nor cgroup v1 with both mounted"}
	}
	h.version, h.cpu = 1, h.parents["cpu"] != ""
	return h
}

// v2At: machines under dir, a child of parent, whose subtree_control must hand memory, pids (and cpu).
func (h cgroupHost) v2At(dir, parent string) cgroupHost {
	h.version, h.parents = 2, map[string]string{"": dir}
	h.cpu = hasControllers(readTrim(filepath.Join(parent, "cgroup.controllers")), "cpu")
	if err := enableControllers(parent, h.cpu); err != nil {
		return cgroupHost{why: fmt.Sprintf("cannot enable the memory and pids controllers in %s: %v", parent, err)}
	}
	if dir != parent {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return cgroupHost{why: fmt.Sprintf("cannot create %s: %v", dir, err)}
		}
		if err := enableControllers(dir, h.cpu); err != nil {
			return cgroupHost{why: fmt.Sprintf("cannot enable the memory and pids controllers in %s: %v", dir, err)}
		}
	}
	return h
}

// v2Delegated: agentd's own cgroup, when it is agentd's alone and writable.
func (h cgroupHost) v2Delegated(env cgroupEnv, m cgroupMount) cgroupHost {
	var own string
	for _, line := range strings.Split(env.selfCgroup, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return cgroupHost{why: "agentd's cgroup v2 path is not in /proc/self/cgroup"}
	}
	dir := filepath.Join(m.point, strings.TrimPrefix(own, m.root))
	if filepath.Base(dir) == cgroupServeLeaf { // moved there by an earlier probe
		return h.v2At(filepath.Dir(dir), filepath.Dir(dir))
	}
	if !hasControllers(readTrim(filepath.Join(dir, "cgroup.controllers")), "memory", "pids") {
		return cgroupHost{why: fmt.Sprintf("agentd's cgroup %s is not given the memory and pids controllers (not delegated: systemd's Delegate=yes does it)", own)}
	}
	for _, p := range strings.Fields(readTrim(filepath.Join(dir, "cgroup.procs"))) {
		if p != strconv.Itoa(env.pid) {
			return cgroupHost{why: fmt.Sprintf("agentd's cgroup %s holds other processes than agentd (pid %s): run agentd in a delegated cgroup of its own (systemd-run --user -p Delegate=yes, or Delegate=yes in its unit)", own, p)}
		}
	}
	leaf := filepath.Join(dir, cgroupServeLeaf)
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return cgroupHost{why: fmt.Sprintf("agentd's cgroup %s is not writable: %v (not delegated: systemd's Delegate=yes does it)", own, err)}
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(env.pid)), 0o644); err != nil {
		os.Remove(leaf)
		return cgroupHost{why: fmt.Sprintf("cannot move agentd into %s: %v", leaf, err)}
	}
	return h.v2At(dir, dir)
}

// tried makes and removes one cgroup where machines' go, so that a host that lists the controllers but
// will not let agentd write them says so at probe, not at the first create.
func (h cgroupHost) tried() cgroupHost {
	if h.version == 0 {
		return h
	}
	if _, err := h.create("probe", 64, 1, 16); err != nil {
		h.remove("probe")
		return cgroupHost{why: "cannot create a cgroup for a machine: " + err.Error()}
	}
	if err := h.remove("probe"); err != nil {
		return cgroupHost{why: "cannot remove a machine's cgroup: " + err.Error()}
	}
	return h
}

func hasControllers(list string, want ...string) bool {
	have := strings.Fields(list)
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func enableControllers(dir string, cpu bool) error {
	have := readTrim(filepath.Join(dir, "cgroup.subtree_control"))
	want := []string{"memory", "pids"}
	if cpu {
		want = append(want, "cpu")
	}
	var add []string
	for _, c := range want {
		if !hasControllers(have, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(add, " ")), 0o644)
}

// dirs are the machine's cgroup directories (one per v1 hierarchy; one on v2).
func (h cgroupHost) dirs(id string) []string {
	var out []string
	for _, c := range []string{"memory", "pids", "cpu", ""} {
		if p, ok := h.parents[c]; ok {
			d := filepath.Join(p, "agentd-"+h.owner+"-"+id)
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// create makes the machine's cgroup with its limits and returns the cgroup.procs files its first
// process must write its pid into. A cgroup of the same name is removed first.
func (h cgroupHost) create(id string, memoryMB int, cpus float64, tasks int) ([]string, error) {
	if h.version == 0 {
		return nil, nil
	}
	if err := h.remove(id); err != nil {
		return nil, err
	}
	settings := h.settings(memoryMB, cpus, tasks)
	name := "agentd-" + h.owner + "-" + id
	var procs []string
	for _, d := range h.dirs(id) {
		if err := h.mkdir(d); err != nil {
			h.remove(id)
			return nil, err
		}
		procs = append(procs, filepath.Join(d, "cgroup.procs"))
	}
	for _, st := range settings {
		f := filepath.Join(h.parents[st.ctrl], name, st.file)
		if st.file == "memory.memsw.limit_in_bytes" || st.file == "memory.swap.max" {
			// Swap accounting is a boot option (v1) or compiled out: without it there is no swap to bound.
			if _, err := os.Stat(f); err != nil {
				continue
			}
		}
		if err := os.WriteFile(f, []byte(st.value), 0o644); err != nil {
			h.remove(id)
			return nil, fmt.Errorf("%s = %s: %v", f, st.value, err)
		}
	}
	return procs, nil
}

// cgroupSetting is one file of a machine's cgroup and what is written to it.
type cgroupSetting struct{ ctrl, file, value string }

// settings are the machine's limits as cgroup files (ctrl: the v1 controller whose hierarchy has the file).
func (h cgroupHost) settings(memoryMB int, cpus float64, tasks int) []cgroupSetting {
	mem, quota := strconv.FormatInt(int64(memoryMB)<<20, 10), int64(cpus*cgroupCPUPeriod)
	var out []cgroupSetting
	if h.version == 1 {
		out = []cgroupSetting{{"memory", "memory.limit_in_bytes", mem}, {"memory", "memory.memsw.limit_in_bytes", mem},
			{"pids", "pids.max", strconv.Itoa(tasks)}}
		if h.cpu {
			out = append(out, cgroupSetting{"cpu", "cpu.cfs_period_us", strconv.Itoa(cgroupCPUPeriod)}, cgroupSetting{"cpu", "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)})
		}
		return out
	}
	out = []cgroupSetting{{"", "memory.max", mem}, {"", "memory.swap.max", "0"}, {"", "pids.max", strconv.Itoa(tasks)}}
	if h.cpu {
		out = append(out, cgroupSetting{"", "cpu.max", fmt.Sprintf("%d %d", quota, cgroupCPUPeriod)})
	}
	return out
}

// mkdir makes a machine's cgroup directory, and the shared agentd parent when another machine's
// removal took it (again if that happened between the two: other servers share the parent).
func (h cgroupHost) mkdir(d string) error {
	var err error
	for try := 0; try < 10; try++ {
		parent := filepath.Dir(d)
		if err = os.MkdirAll(parent, 0o755); err != nil {
			return err
		}
		if h.version == 2 { // a parent made again hands its controllers down again
			if err = enableControllers(parent, h.cpu); err != nil {
				return fmt.Errorf("cannot enable the controllers in %s: %v", parent, err)
			}
		}
		if err = os.Mkdir(d, 0o755); err == nil || !os.IsNotExist(err) {
			return err
		}
	}
	return err
}

// remove kills what is left in the machine's cgroup and removes it (and the shared agentd parent, when
// it is empty); nothing to remove is no error.
func (h cgroupHost) remove(id string) error {
	var errs []error
	for _, d := range h.dirs(id) {
		if _, err := os.Stat(d); err != nil {
			continue
		}
		os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0o644) // v2 ≥ 5.14: everything at once
		var err error
		for deadline := time.Now().Add(5 * time.Second); ; {
			for _, p := range strings.Fields(readTrim(filepath.Join(d, "cgroup.procs"))) {
				if pid, perr := strconv.Atoi(p); perr == nil && pid > 0 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if err = os.Remove(d); err == nil || os.IsNotExist(err) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond) // the killed processes leave the cgroup once reaped
		}
		if err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("cannot remove the cgroup %s: %v", d, err))
		}
		if parent := filepath.Dir(d); filepath.Base(parent) == "agentd" {
			os.Remove(parent) // fails while another machine's cgroup is in it
		}
	}
	return errors.Join(errs...)
}

// list is this owner's machine ids that have a cgroup. A sweep lists them BEFORE the machine
// directories: a machine's directory exists before its cgroup, so one listed here and missing from a
// later directory listing is an orphan, while a cgroup made after a directory listing is never taken.
func (h cgroupHost) list() []string {
	prefix := "agentd-" + h.owner + "-"
	seen := map[string]bool{}
	var ids []string
	for _, p := range h.parents {
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			if id, ok := strings.CutPrefix(e.Name(), prefix); ok && e.IsDir() && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// sweep removes the cgroups of ids (from list) whose machine is not in dirs.
func (h cgroupHost) sweep(ids []string, dirs map[string]bool) {
	for _, id := range ids {
		if !dirs[id] {
			h.remove(id)
		}
	}
}

// note says, for the doctor, which limits apply to a sandbox machine.
func (h cgroupHost) note() string {
	per := fmt.Sprintf("per process: rlimits (data memoryMb, at least %d MB; file size diskMb; %d h of CPU; %d processes where the kernel applies it) and a watchdog killing everything past %d processes",
		sandboxMinDataMB, sandboxCPUSecs/3600, sandboxNproc, sandboxMaxProcs)
	if h.version == 0 {
		return "no cgroups (" + h.why + "): memoryMb is bounded per process only and cpus is not enforced; " + per
	}
	var where []string
	for _, d := range h.dirs("<id>") {
		where = append(where, filepath.Dir(d))
	}
	cpu := "cpus (CPU bandwidth)"
	if !h.cpu {
		cpu = "not cpus (no cpu controller)"
	}
	return fmt.Sprintf("cgroup v%d per machine under %s: memoryMb (no swap beyond it), %d tasks, %s; and %s",
		h.version, strings.Join(where, ", "), sandboxNproc, cpu, per)
}
