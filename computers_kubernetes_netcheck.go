// computers_kubernetes_netcheck.go — whether the cluster's network plugin enforces NetworkPolicies, the
// only thing that cuts a `none` or `egress` pod off from the pod network (a plugin that does not, such as
// the plain bridge plugin of CI's cluster, accepts the policy and ignores it).
//
// Entry points: computerService.startBackgroundChecks (serve at start when computerProvider is
// kubernetes; every GET /v1/doctor), kubeProvider.netDoctor (the doctor's state and warning),
// kubeProvider.stopNetCheck (the provider's close), netprobeMain (`agentd netprobe`, hidden: the in-pod half).
//
// The check, once per server (cached for its life; an inconclusive one is tried again at a doctor request
// after kubeNetRetry), in the background, never in a request's way: agentd's deny-all NetworkPolicy is
// applied first, then two small pods of the base flavor's image with a machine's hardening (a listener,
// and a client the policy selects), agentd's helper is copied into both, the listener listens, and the
// client dials the listener's pod IP. Connected (and answered by the listener): the policy is not
// enforced, which the doctor warns about. Not connected: the policy is deleted and the client dials again
// until it connects, which shows the policy made the difference (enforced); if it never connects, pod
// traffic does not get through here at all and the check says it is inconclusive (also a warning: not
// shown to be enforced). The probe pods and the policy carry agentd.owner but no agentd.id (they are not
// machines), have fixed names per owner (a check killed half-way is cleaned by the next one), and are
// deleted whatever happens. No cheaper check is sound: a cluster does not say whether its plugin enforces
// policies, the Role cannot read kube-system, and a refused dial to a pod with no listener would also be
// what a plugin that rejects (rather than drops) denied traffic answers.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	netEnforced    = "enforced"
	netNotEnforced = "not enforced"
	netChecking    = "checking"
	netUnknown     = "unknown"

	kubeNetRetry      = time.Minute         // an inconclusive check is tried again after this
	kubeNetTimeout    = 5 * time.Minute     // the whole check
	kubeNetUnblocked  = 30 * time.Second    // how long the client may take to connect once the policy is gone
	kubeNetDialMillis = 3000                // one dial's timeout inside the client pod
	kubeNetPort       = "8397"              // the listener's port (not privileged: the pod is not root)
	netprobeBanner    = "agentd-netprobe\n" // what the listener says, so a connection is known to be its
)

// kubeNetCheck is the check's state; the kubeProvider owns its goroutine (stopNetCheck cancels and waits).
type kubeNetCheck struct {
	mu     sync.Mutex
	state  string // "" (not started), checking, enforced, not enforced, unknown
	detail string
	at     time.Time // when the last check ended
	closed bool
	cancel context.CancelFunc
	done   chan struct{}
}

// startBackgroundChecks starts what the doctor reports from the background: the network-policy check,
// when this server uses a cluster (computerProvider kubernetes, auto selecting it, or machines there).
func (c *computerService) startBackgroundChecks(ctx context.Context) {
	k, ok := c.providerByName("kubernetes").(*kubeProvider)
	if !ok {
		return
	}
	// The cluster answers: its trial (computers_proof.go) passed, or at least the probe that trial starts
	// with did; nothing is probed or waited for here.
	if r, _ := c.proofOf(k); !r.ok {
		c.mu.Lock()
		pr, ok := c.probes[k.meta().name]
		c.mu.Unlock()
		if !ok || !pr.available {
			return
		}
	}
	if c.provider != "kubernetes" && !k.watching() {
		if p, _ := c.selected(); p != provider(k) {
			return
		}
	}
	k.startNetCheck()
}

// startNetCheck starts the check unless it ran (or runs), or an inconclusive one ended too recently.
func (k *kubeProvider) startNetCheck() {
	n := &k.net
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed, n.state == netChecking, n.state == netEnforced, n.state == netNotEnforced:
		return
	case n.state == netUnknown && time.Since(n.at) < kubeNetRetry:
		return
	}
	ctx, cancel := context.WithTimeout(k.c.ctx, kubeNetTimeout)
	n.state, n.detail, n.cancel, n.done = netChecking, "", cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		defer cancel()
		st, detail := k.runNetCheck(ctx)
		k.c.log.Info("computers: kubernetes network policies", "state", st, "detail", detail)
		n.mu.Lock()
		n.state, n.detail, n.at = st, detail, time.Now()
		n.mu.Unlock()
	}(n.done)
}

func (k *kubeProvider) stopNetCheck() {
	n := &k.net
	n.mu.Lock()
	n.closed = true
	cancel, done := n.cancel, n.done
	n.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// netStarted: the check ran or runs.
func (k *kubeProvider) netStarted() bool {
	k.net.mu.Lock()
	defer k.net.mu.Unlock()
	return k.net.state != ""
}

// netDoctor is the doctor's view: the state for the provider's entry and, when the policies are not
// shown to be enforced, a warning saying what that means and the fix.
func (k *kubeProvider) netDoctor() (state, warning string) {
	n := &k.net
	n.mu.Lock()
	st, detail := n.state, n.detail
	n.mu.Unlock()
	const means = "machines in network.mode none or egress are not cut off from the pod network there: a program in one reaches other pods, the cluster's services and whatever the nodes route to, around agentd's egress proxy"
	const fix = "install a network plugin that enforces NetworkPolicy (Calico, Cilium, Antrea, …), or run such machines on docker or podman"
	switch st {
	case "":
		return "not checked yet (agentd serve checks it in the background once the cluster is in use; ask the server's doctor)", ""
	case netChecking:
		return "being checked (two probe pods)", ""
	case netEnforced:
		return netEnforced + ": " + detail, ""
	case netNotEnforced:
		return netNotEnforced + ": " + detail, "kubernetes: the cluster's network plugin does not enforce NetworkPolicies (" + detail + "): " + means + "; " + fix
	}
	return "not shown: " + detail, "kubernetes: the cluster's network plugin could not be shown to enforce NetworkPolicies (" + detail + "); until it is, " + means + " as far as agentd can tell; " + fix
}

// runNetCheck is the check itself; see the file comment.
func (k *kubeProvider) runNetCheck(ctx context.Context) (state, detail string) {
	if k.c.helper == "" {
		return netUnknown, "not checked: the probe pods run agentd's helper, and the exec channel is off (execChannel)"
	}
	base := "agentd-netcheck-" + kubeSlug(k.c.owner, 40)
	lis, cli := base+"-listen", base+"-client"
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 90*time.Second)
		defer cancel()
		if _, err := k.call(cctx, nil, "delete", "pod/"+lis, "pod/"+cli, "networkpolicy/"+base, "--ignore-not-found",
			"--wait=true", "--grace-period=1", "--timeout=60s"); err != nil {
			k.c.log.Warn("computers: kubernetes network check: removing its pods", "err", err)
		}
	}
	cleanup() // what a check killed half-way left
	defer cleanup()
	fail := func(what string, err error) (string, string) {
		if ctx.Err() != nil {
			return netUnknown, "the check did not finish: " + what
		}
		return netUnknown, what + ": " + firstLine(err.Error())
	}

	labels := func(role string) map[string]string {
		return map[string]string{"agentd.owner": k.c.owner, "agentd.netcheck": role, "app.kubernetes.io/managed-by": "agentd"}
	}
	sp := poolSpec("base")
	sp.CPUs, sp.MemoryMB, sp.DiskMB = 0.1, 128, 256
	m := &ComputerInfo{Image: k.c.machineImage(k, sp), Workdir: "/work", Spec: sp}
	policy, _ := k.policyDoc(base, labels("policy"), labels("client"))
	if _, err := k.call(ctx, bytes.NewReader(policy), "apply", "-f", "-"); err != nil {
		return fail("applying the deny-all NetworkPolicy", err)
	}
	for _, pod := range []struct{ name, role string }{{lis, "listen"}, {cli, "client"}} {
		doc, _ := k.podDoc(pod.name, labels(pod.role), m)
		if _, err := k.call(ctx, bytes.NewReader(doc), "apply", "-f", "-"); err != nil {
			return fail("creating the probe pod "+pod.name, err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, name := range []string{lis, cli} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = k.waitReadyPod(ctx, name, m); errs[i] == nil {
				errs[i] = k.copyHelperTo(ctx, name)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fail("starting the probe pods", err)
	}
	ip, err := k.call(ctx, nil, "get", "pod", lis, "-o", "jsonpath={.status.podIP}")
	if ip = strings.TrimSpace(ip); err != nil || net.ParseIP(ip) == nil {
		return fail("reading the listener's pod IP", errors.Join(err, fmt.Errorf("got %q", ip)))
	}

	// The listener runs as long as its `kubectl exec -i` does (it ends at stdin EOF).
	lctx, stopListener := context.WithCancel(ctx)
	lcmd := k.cli(lctx, "exec", "-i", lis, "-c", kubeContainer, "--", helperInMachine, "netprobe", "listen", kubeNetPort)
	stdin, err1 := lcmd.StdinPipe()
	stdout, err2 := lcmd.StdoutPipe()
	if err := errors.Join(err1, err2, lcmd.Start()); err != nil {
		stopListener()
		return fail("starting the listener", err)
	}
	ready, read := make(chan string, 1), make(chan struct{})
	go func() { // ends when the listener's stdout closes (the deferred stop waits for it)
		defer close(read)
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		io.Copy(io.Discard, stdout)
	}()
	defer func() { stdin.Close(); stopListener(); <-read; lcmd.Wait() }()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "listening" {
			return fail("starting the listener", fmt.Errorf("it said %q", line))
		}
	case <-ctx.Done():
		return fail("starting the listener", ctx.Err())
	}

	addr := net.JoinHostPort(ip, kubeNetPort)
	dial := func() (connected bool, said string, err error) {
		out, err := k.call(ctx, nil, "exec", cli, "-c", kubeContainer, "--", helperInMachine, "netprobe", "dial", addr, strconv.Itoa(kubeNetDialMillis))
		out = strings.TrimSpace(out)
		switch {
		case out == "connected":
			return true, out, nil
		case strings.HasPrefix(out, "blocked"):
			return false, out, nil
		}
		return false, out, fmt.Errorf("the dial did not run: %v", err)
	}
	connected, said, err := dial()
	switch {
	case err != nil:
		return fail("dialing from the client pod", err)
	case connected:
		return netNotEnforced, "a probe pod under agentd's deny-all NetworkPolicy connected to another pod's IP"
	}
	// Blocked: show that it was the policy, by removing it.
	if _, err := k.call(ctx, nil, "delete", "networkpolicy", base, "--ignore-not-found", "--wait=true"); err != nil {
		return fail("removing the probe's NetworkPolicy", err)
	}
	deadline := time.Now().Add(kubeNetUnblocked)
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fail("dialing once the policy was removed", ctx.Err())
		case <-tick.C:
		}
		ok, out, err := dial()
		if err != nil {
			return fail("dialing from the client pod", err)
		}
		if ok {
			return netEnforced, "a probe pod under agentd's deny-all NetworkPolicy could not reach another pod (" + said + "), and could once the policy was removed"
		}
		if time.Now().After(deadline) {
			return netUnknown, "inconclusive: a probe pod could not reach another pod even without a policy (" + out + "), so pod-to-pod traffic does not get through here at all"
		}
		tick.Reset(time.Second)
	}
}

// kubeSlug is s as a DNS-1123 label fragment of at most n characters.
func kubeSlug(s string, n int) string {
	b := []byte(strings.ToLower(s))
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b[:min(len(b), n)]), "-")
}

// netprobeMain is `agentd netprobe listen PORT` and `agentd netprobe dial HOST:PORT MILLIS` (hidden), the
// in-pod half of the check: the listener says "listening", answers every connection with the banner and
// ends at stdin EOF; the dialer says "connected" (the banner came back) or "blocked: why" and fails.
func netprobeMain(args []string, stdin io.Reader, stdout io.Writer) error {
	switch {
	case len(args) == 2 && args[0] == "listen":
		ln, err := net.Listen("tcp", ":"+args[1])
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "listening")
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(c, netprobeBanner)
				c.Close()
			}
		}()
		io.Copy(io.Discard, stdin)
		ln.Close()
		<-done
		return nil
	case len(args) == 3 && args[0] == "dial":
		ms, err := strconv.Atoi(args[2])
		if err != nil || ms <= 0 {
			return errors.New("netprobe dial: MILLIS must be a positive number")
		}
		c, err := net.DialTimeout("tcp", args[1], time.Duration(ms)*time.Millisecond)
		if err == nil {
			c.SetReadDeadline(time.Now().Add(time.Duration(ms) * time.Millisecond))
			got, rerr := io.ReadAll(io.LimitReader(c, int64(len(netprobeBanner))))
			c.Close()
			if string(got) == netprobeBanner {
				fmt.Fprintln(stdout, "connected")
				return nil
			}
			err = fmt.Errorf("connected, but no banner came back (%q, %v)", got, rerr)
		}
		fmt.Fprintln(stdout, "blocked:", err)
		return errors.New("netprobe: blocked")
	}
	return errors.New("usage: agentd netprobe listen PORT | agentd netprobe dial HOST:PORT MILLIS")
}
