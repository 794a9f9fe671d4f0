package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// requireKubernetes skips a kubernetes test unless AGENT_TEST_K8S=1 (.ci/run starts a real cluster and
// sets it, with KUBECONFIG); then an unavailable provider fails it.
func requireKubernetes(t *testing.T) {
	t.Helper()
	if os.Getenv("AGENT_TEST_K8S") != "1" {
		t.Skip("no Kubernetes cluster (AGENT_TEST_K8S=1 with KUBECONFIG runs these; .ci/run starts one from k8s/)")
	}
	e := newTestServer(t, withHostEnv)
	p := e.s.computers.providerByName("kubernetes")
	if p == nil {
		t.Fatal("AGENT_TEST_K8S=1 but the kubernetes provider is not configured")
	}
	pr := e.s.computers.probe(context.Background(), p)
	e.close()
	if !pr.available {
		t.Fatalf("provider kubernetes is unavailable with AGENT_TEST_K8S=1: %s (%s)", pr.reason, pr.hint)
	}
}

// kubectlTest runs kubectl as the tests' provider does (KUBECONFIG, namespace agentd).
func kubectlTest(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("kubectl", append([]string{"-n", kubeDefaultNS}, args...)...).CombinedOutput()
	return string(out), err
}

// checkNoKubeLeaks: after the suite no pod (a machine's or the network check's) and no claim of this
// test process's owners is left in the cluster. (The tests' Role may not list NetworkPolicies; a
// machine's policy is deleted in the same kubectl call as its pod and claim.)
// A live test server's trial machine (computers_proof.go) is destroyed when its trial ends, so the check
// polls until nothing of this process's owners is left, up to a deadline; what is left then leaked.
func checkNoKubeLeaks(t *testing.T) {
	if os.Getenv("AGENT_TEST_K8S") != "1" {
		return
	}
	var leaked []string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := kubectlTest(t, "get", "pods,pvc", "-l", "agentd.owner", "-o", `jsonpath={range .items[*]}{.kind}/{.metadata.name} {.metadata.labels.agentd\.owner}{"\n"}{end}`)
		if err != nil {
			t.Errorf("kubectl get pods,pvc: %v: %s", err, out)
			return
		}
		leaked = leaked[:0]
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[1], testOwnerPrefix()) {
				leaked = append(leaked, line)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second) // polling the cluster with a deadline
	}
	for _, line := range leaked {
		t.Errorf("kubernetes: leaked %s", line)
	}
}

// TestKubernetesPodSpec: the Pod agentd applies carries the hardening, limits and labels (no
// cluster needed).
func TestKubernetesPodSpec(t *testing.T) {
	e := newTestServer(t, func(c *testSetup) {
		c.Kubernetes = &kubeConfig{RuntimeClassName: "gvisor", NodeSelector: map[string]string{"pool": "agents"},
			Tolerations: []map[string]any{{"key": "agents", "operator": "Exists", "effect": "NoSchedule"}}}
	})
	k, ok := e.s.computers.providerByName("kubernetes").(*kubeProvider)
	if !ok {
		t.Fatal("a configured kubernetes provider is missing")
	}
	if names := providerNames(e.s.computers); strings.Join(names, ",") != "docker,podman,kubernetes,sandbox,local" {
		t.Fatalf("priority order: %v", names)
	}
	m := &ComputerInfo{ID: "cmp_abc123", Image: "debian:bookworm", Workdir: "/work",
		Spec: ComputerSpec{CPUs: 2, MemoryMB: 1024, DiskMB: 4096, Env: map[string]string{"A": "b"}, Labels: map[string]string{"team": "x"}}}
	doc, err := k.podJSON(m)
	if err != nil {
		t.Fatal(err)
	}
	var pod struct {
		Metadata struct {
			Name   string
			Labels map[string]string
		}
		Spec struct {
			AutomountServiceAccountToken *bool
			RuntimeClassName             string
			NodeSelector                 map[string]string
			Tolerations                  []map[string]any
			SecurityContext              struct {
				RunAsUser, RunAsGroup int
				RunAsNonRoot          bool
				SeccompProfile        struct{ Type string }
			}
			Containers []struct {
				Image           string
				Env             []struct{ Name, Value string }
				SecurityContext struct {
					AllowPrivilegeEscalation *bool
					ReadOnlyRootFilesystem   bool
					Capabilities             struct{ Drop []string }
				}
				Resources    struct{ Limits, Requests map[string]string }
				VolumeMounts []struct{ Name, MountPath string }
			}
			Volumes []struct {
				Name     string
				EmptyDir *struct{ SizeLimit string }
			}
		}
	}
	if err := json.Unmarshal(doc, &pod); err != nil {
		t.Fatal(err)
	}
	sc, c0 := pod.Spec.SecurityContext, pod.Spec.Containers[0]
	switch {
	case pod.Metadata.Name != "agentd-cmp-abc123" || pod.Metadata.Labels["agentd.id"] != m.ID || pod.Metadata.Labels["agentd.owner"] != e.s.computers.owner || pod.Metadata.Labels["agentd.label.team"] != "x":
		t.Fatalf("metadata: %+v", pod.Metadata)
	case pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken:
		t.Fatal("the service-account token is mounted")
	case sc.RunAsUser != 1000 || sc.RunAsGroup != 1000 || !sc.RunAsNonRoot || sc.SeccompProfile.Type != "RuntimeDefault":
		t.Fatalf("pod securityContext: %+v", sc)
	case c0.SecurityContext.AllowPrivilegeEscalation == nil || *c0.SecurityContext.AllowPrivilegeEscalation || !c0.SecurityContext.ReadOnlyRootFilesystem || strings.Join(c0.SecurityContext.Capabilities.Drop, ",") != "ALL":
		t.Fatalf("container securityContext: %+v", c0.SecurityContext)
	case c0.Resources.Limits["cpu"] != "2000m" || c0.Resources.Limits["memory"] != "1024Mi" || c0.Resources.Limits["ephemeral-storage"] != "4096Mi" || c0.Resources.Requests["cpu"] != "200m":
		t.Fatalf("resources: %+v", c0.Resources)
	case pod.Spec.RuntimeClassName != "gvisor" || pod.Spec.NodeSelector["pool"] != "agents" || len(pod.Spec.Tolerations) != 1:
		t.Fatalf("scheduling: %+v", pod.Spec)
	case c0.Image != m.Image || len(c0.Env) != 2 || c0.Env[0].Name != "HOME" || c0.Env[1].Name != "A":
		t.Fatalf("image and env: %+v", c0)
	}
	mounts := map[string]string{}
	for _, vm := range c0.VolumeMounts {
		mounts[vm.MountPath] = vm.Name
	}
	sizes := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil {
			t.Fatalf("volume %s is not an emptyDir", v.Name)
		}
		sizes[v.Name] = v.EmptyDir.SizeLimit
	}
	if mounts["/work"] != "work" || mounts["/tmp"] != "tmp" || mounts["/.agentd"] != "agentd" || sizes["work"] != "4096Mi" || sizes["tmp"] == "" {
		t.Fatalf("volumes: %v %v", mounts, sizes)
	}
	for _, sp := range []ComputerSpec{{Packages: []string{"jq"}}, {User: "0:0"}, {Mounts: []Mount{{Source: "/srv", Target: "/data"}}}} {
		if err := k.supports(sp); err == nil || asAPIError(err).Code != codeNotImplemented {
			t.Fatalf("%+v: %v", sp, err)
		}
	}

	// persist: /work is the machine's claim, diskMb of the configured class.
	if err := k.supports(ComputerSpec{Persist: true}); err != nil {
		t.Fatalf("persist refused: %v", err)
	}
	m.Spec.Persist, k.cfg.StorageClassName = true, "fast-ssd"
	doc, _ = k.podJSON(m)
	var vols struct {
		Spec struct {
			Volumes []struct {
				Name                  string
				EmptyDir              *struct{}
				PersistentVolumeClaim *struct{ ClaimName string }
			}
		}
	}
	json.Unmarshal(doc, &vols)
	if v := vols.Spec.Volumes[0]; v.Name != "work" || v.EmptyDir != nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "agentd-cmp-abc123" {
		t.Fatalf("persist /work volume: %s", doc)
	}
	doc, _ = k.claimJSON(m)
	var claim struct {
		Kind     string
		Metadata struct {
			Name   string
			Labels map[string]string
		}
		Spec struct {
			AccessModes      []string
			StorageClassName string
			Resources        struct{ Requests map[string]string }
		}
	}
	json.Unmarshal(doc, &claim)
	if claim.Kind != "PersistentVolumeClaim" || claim.Metadata.Name != "agentd-cmp-abc123" || claim.Metadata.Labels["agentd.id"] != m.ID ||
		claim.Metadata.Labels["agentd.owner"] != e.s.computers.owner || claim.Spec.StorageClassName != "fast-ssd" ||
		claim.Spec.Resources.Requests["storage"] != "4096Mi" || strings.Join(claim.Spec.AccessModes, ",") != "ReadWriteOnce" {
		t.Fatalf("claim: %s", doc)
	}
	k.cfg.StorageClassName = ""
	if doc, _ = k.claimJSON(m); strings.Contains(string(doc), "storageClassName") {
		t.Fatalf("no class configured, yet the claim names one (the cluster's default must apply): %s", doc)
	}
}

// TestCanIList reads `kubectl auth can-i --list` as the probe does.
func TestCanIList(t *testing.T) {
	table := `Resources                                       Non-Resource URLs   Resource Names   Verbs
pods                                            []                  []               [create get list watch patch delete]
pods/exec                                       []                  []               [create]
networkpolicies.networking.k8s.io               []                  []               [get create]
                                                [/api/*]            []               [get]
`
	for _, c := range []struct {
		verb, res string
		want      bool
	}{{"create", "pods", true}, {"delete", "pods", true}, {"create", "pods/exec", true}, {"create", "pods/portforward", false},
		{"get", "networkpolicies", true}, {"delete", "networkpolicies", false}, {"list", "events", false}} {
		if got := canIList(table, c.verb, c.res); got != c.want {
			t.Errorf("%s %s: %v", c.verb, c.res, got)
		}
	}
	if !canIList("*.*   []   []   [*]\n", "create", "pods/exec") {
		t.Error("a cluster admin's *.* [*]")
	}
}

func providerNames(c *computerService) []string {
	var names []string
	for _, p := range c.providers {
		names = append(names, p.meta().name)
	}
	return names
}

// TestKubernetesNotConfigured: without a kubernetes block there is no such provider, and naming it is a
// clear 503.
func TestKubernetesNotConfigured(t *testing.T) {
	e := newTestServer(t, func(c *testSetup) { c.Kubernetes = nil })
	if e.s.computers.providerByName("kubernetes") != nil {
		t.Fatal("kubernetes provider without configuration")
	}
	e.wantError("POST", "/v1/computers", map[string]any{"provider": "kubernetes"}, 503, codeProviderUnavailable)
}

// TestKubernetesProbeReasons: an unreachable server and a missing namespace are unavailable with a reason
// and a hint naming the fix.
func TestKubernetesProbeReasons(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not installed")
	}
	bad := t.TempDir() + "/kubeconfig"
	os.WriteFile(bad, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster: {server: \"https://127.0.0.1:1\"}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: x, user: u}\ncurrent-context: x\n"), 0o600)
	e := newTestServer(t, func(c *testSetup) { c.Kubernetes = &kubeConfig{Kubeconfig: bad} })
	pr := e.s.computers.probe(context.Background(), e.s.computers.providerByName("kubernetes"))
	if pr.available || !strings.Contains(pr.reason, "not reachable") || !strings.Contains(pr.hint, "kubeconfig") {
		t.Fatalf("unreachable: %+v", pr)
	}
	if os.Getenv("AGENT_TEST_K8S") != "1" {
		return
	}
	e = newTestServer(t, func(c *testSetup) {
		c.Kubernetes = &kubeConfig{Kubeconfig: os.Getenv("KUBECONFIG"), Namespace: "agentd-no-such-ns"}
	})
	pr = e.s.computers.probe(context.Background(), e.s.computers.providerByName("kubernetes"))
	if pr.available || !(strings.Contains(pr.reason, "does not exist") || strings.Contains(pr.reason, "may not")) || pr.hint == "" {
		t.Fatalf("missing namespace: %+v", pr)
	}
}

// TestKubernetesFaults: create failures carry the pod's (or the claim's) events; a pod deleted behind
// agentd's back is noticed without a use (the computer stopped, with an event), and start brings it back.
func TestKubernetesFaults(t *testing.T) {
	requireKubernetes(t)
	t.Run("missing-image", func(t *testing.T) {
		t.Parallel()
		e := newTestServer(t, withHostEnv, func(c *testSetup) {
			c.Images = map[string]string{"base": "docker.io/library/agentd-no-such-image:never"}
		})
		env := e.wantError("POST", "/v1/computers", map[string]any{"provider": "kubernetes"}, 500, codeComputerFailed)
		msg := env["message"].(string)
		if !strings.Contains(msg, "events:") || !(strings.Contains(msg, "ErrImagePull") || strings.Contains(msg, "ImagePullBackOff") || strings.Contains(msg, "Failed")) || !strings.Contains(env["hint"].(string), "image") {
			t.Fatalf("missing image: %v", env)
		}
	})
	t.Run("unschedulable", func(t *testing.T) {
		t.Parallel()
		e := newTestServer(t, withHostEnv)
		env := e.wantError("POST", "/v1/computers", map[string]any{"provider": "kubernetes", "cpus": 64}, 500, codeComputerFailed)
		if msg := env["message"].(string); !strings.Contains(msg, "Unschedulable") || !strings.Contains(msg, "Insufficient cpu") {
			t.Fatalf("unschedulable: %v", env)
		}
	})
	t.Run("no-such-storage-class", func(t *testing.T) {
		t.Parallel()
		e := newTestServer(t, withHostEnv, func(c *testSetup) {
			c.Kubernetes = &kubeConfig{Kubeconfig: os.Getenv("KUBECONFIG"), StorageClassName: "agentd-no-such-class"}
		})
		env := e.wantError("POST", "/v1/computers", map[string]any{"provider": "kubernetes", "persist": true}, 500, codeComputerFailed)
		if msg := env["message"].(string); !strings.Contains(msg, "agentd-no-such-class") || !strings.Contains(env["hint"].(string), "storageClassName") {
			t.Fatalf("a claim of a class that does not exist: %v", env)
		}
	})
	t.Run("pod-deleted", func(t *testing.T) {
		t.Parallel()
		e := newTestServer(t, withHostEnv)
		m := e.create(map[string]any{"provider": "kubernetes", "idleTimeoutSec": 0})
		if out := e.sh(m.ID, "echo up"); out != "up\n" {
			t.Fatalf("exec: %q", out)
		}
		sub, _ := e.s.hub.subscribe()
		defer e.s.hub.unsubscribe(sub)
		k := e.s.computers.providerByName("kubernetes").(*kubeProvider)
		if out, err := kubectlTest(t, "delete", "pod", k.pod(&m), "--wait=true", "--grace-period=1"); err != nil {
			t.Fatalf("kubectl delete: %v: %s", err, out)
		}
		// Noticed without a use: the pod watch stops the computer and says so on `computers`.
		var events []string
		eventually(t, "an event from the pod watch", func() bool {
			for len(sub.ch) > 0 {
				if ev := <-sub.ch; ev.Topic == "computers" {
					p, _ := ev.Payload.(map[string]any)
					events = append(events, fmt.Sprint(ev.Type, " ", p["computerId"], " ", p["reason"]))
				}
			}
			return len(events) > 0
		})
		if !slices.Equal(events, []string{"computer_stopped " + m.ID + " " + kubeStoppedReason}) {
			t.Fatalf("computers events after the pod was deleted: %v", events)
		}
		var got ComputerInfo
		if e.call("GET", "/v1/computers/"+m.ID, nil, 200, &got); got.State != "stopped" || !strings.Contains(got.Error, "deleted outside agentd") {
			t.Fatalf("after kubectl delete pod: %+v", got)
		}
		e.wantError("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": "true"}, 500, codeComputerFailed)
		if e.call("POST", "/v1/computers/"+m.ID+"/start", nil, 200, &got); got.State != "running" {
			t.Fatalf("start: %+v", got)
		}
		if out := e.sh(m.ID, "echo back"); out != "back\n" {
			t.Fatalf("exec after start: %q", out)
		}
		e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
		if out, _ := kubectlTest(t, "get", "pod", k.pod(&m), "--ignore-not-found", "-o", "name"); strings.TrimSpace(out) != "" {
			t.Fatalf("pod left after delete: %s", out)
		}
	})
	t.Cleanup(func() { checkNoKubeLeaks(t) })
}

// TestKubernetesKill9Adopts: agentd killed with SIGKILL leaves its pod running; the next agentd on the
// same data directory adopts it (the files are there), and deleting it leaves no pod behind.
func TestKubernetesKill9Adopts(t *testing.T) {
	requireKubernetes(t)
	home := t.TempDir()
	os.WriteFile(home+"/instance-id", []byte(testOwnerPrefix()+randomChars(4)+"\n"), 0o600)
	cfg := "computerProvider: kubernetes\nexecChannel: false\nimages: {base: " + testImage + "}\nkubernetes: {kubeconfig: \"" + os.Getenv("KUBECONFIG") + "\"}\n"
	if err := os.WriteFile(home+"/config.yaml", []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := func() (*exec.Cmd, *testServer) { return startServeChild(t, home) }
	cmd, a := serve()
	m := a.create(map[string]any{"idleTimeoutSec": 0})
	if m.Provider != "kubernetes" {
		t.Fatalf("created on %s", m.Provider)
	}
	a.sh(m.ID, "echo kept > note")
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	_, b := serve()
	var got ComputerInfo
	if b.call("GET", "/v1/computers/"+m.ID, nil, 200, &got); got.State != "running" {
		t.Fatalf("adopted: %+v", got)
	}
	if out := b.sh(m.ID, "cat note"); out != "kept\n" {
		t.Fatalf("after the restart: %q", out)
	}
	b.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	checkNoKubeLeaks(t)
}

// TestKubernetesPersist: persist is a PersistentVolumeClaim for /work (k8s/up.sh's provisioner binds it
// for real): a file survives stop and start, the stopped machine is adopted by a restarted server through
// its claim, an unrecorded claim of this owner is an orphan the reaper removes, and destroy removes the
// claim.
func TestKubernetesPersist(t *testing.T) {
	requireKubernetes(t)
	home := t.TempDir()
	a := newTestServer(t, withHostEnv, withHome(home))
	m := a.create(map[string]any{"provider": "kubernetes", "persist": true, "idleTimeoutSec": 0, "diskMb": 64})
	k := a.s.computers.providerByName("kubernetes").(*kubeProvider)
	claim := func() string {
		out, err := kubectlTest(t, "get", "pvc", k.pod(&m), "--ignore-not-found", "-o", "jsonpath={.status.phase} {.spec.resources.requests.storage}")
		if err != nil {
			t.Fatalf("kubectl get pvc: %v: %s", err, out)
		}
		return strings.TrimSpace(out)
	}
	if got := claim(); got != "Bound 64Mi" {
		t.Fatalf("claim: %q", got)
	}
	a.sh(m.ID, "echo kept > /work/f")
	a.call("POST", "/v1/computers/"+m.ID+"/stop", nil, 200, nil)
	if out, _ := kubectlTest(t, "get", "pod", k.pod(&m), "--ignore-not-found", "-o", "name"); strings.TrimSpace(out) != "" || claim() != "Bound 64Mi" {
		t.Fatalf("after stop: pod %q, claim %q", out, claim())
	}
	a.keep = true
	a.close()

	// An unrecorded claim of this owner (its machine's record is gone): an orphan.
	orphan := "cmp_orphan" + strings.ToLower(randomChars(4))
	doc, _ := k.claimJSON(&ComputerInfo{ID: orphan, Spec: ComputerSpec{DiskMB: 16}})
	cmd := exec.Command("kubectl", "-n", kubeDefaultNS, "create", "-f", "-")
	cmd.Stdin = strings.NewReader(string(doc))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("orphan claim: %v: %s", err, out)
	}
	b := newTestServer(t, withHostEnv, withHome(home))
	var got ComputerInfo
	if b.call("GET", "/v1/computers/"+m.ID, nil, 200, &got); got.State != "stopped" {
		t.Fatalf("adopted: %+v", got)
	}
	b.call("POST", "/v1/computers/"+m.ID+"/start", nil, 200, nil)
	if out := b.sh(m.ID, "cat /work/f; id -u"); out != "kept\n1000\n" {
		t.Fatalf("after stop, restart and start: %q", out)
	}
	eventually(t, "the orphan claim in the doctor's warnings", func() bool {
		_, _, _, warnings := b.s.computers.doctor(context.Background())
		return slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, orphan) })
	})
	if reaped := b.s.computers.sweep(context.Background()); reaped[orphan] != "orphan" {
		t.Fatalf("orphan claim not reaped: %v", reaped)
	}
	b.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	if got := claim(); got != "" {
		t.Fatalf("claim left after delete: %q", got)
	}
	checkNoKubeLeaks(t)
}

// TestKubernetesNetworkPolicyCheck: the doctor's check runs in the background (two probe pods) and, on
// CI's cluster, whose bridge plugin enforces no NetworkPolicy, ends in a warning naming what that means
// and the fix; its pods are gone afterwards.
func TestKubernetesNetworkPolicyCheck(t *testing.T) {
	requireKubernetes(t)
	e := newTestServer(t, withHostEnv, func(c *testSetup) { c.ComputerProvider = "kubernetes" })
	entry := func() (string, []string) {
		var rep DoctorReport
		e.call("GET", "/v1/doctor", nil, 200, &rep) // the first one starts the check; none waits for it
		for _, p := range rep.Providers {
			if p.Name == "kubernetes" {
				return p.NetworkPolicies, rep.Warnings
			}
		}
		t.Fatalf("no kubernetes provider in the doctor: %+v", rep.Providers)
		return "", nil
	}
	var state string
	var warnings []string
	eventually(t, "the network-policy check to end", func() bool {
		state, warnings = entry()
		return state != "" && !strings.HasPrefix(state, "being checked")
	})
	if os.Getenv("AGENT_TEST_CHANNEL") == "0" { // no helper to run in the probe pods: said, not guessed
		if !strings.HasPrefix(state, "not shown") || !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "could not be shown to enforce NetworkPolicies") }) {
			t.Fatalf("channel off: %q %v", state, warnings)
		}
	} else {
		w := warnings[slices.IndexFunc(warnings, func(w string) bool { return strings.HasPrefix(w, "kubernetes:") })]
		if !strings.HasPrefix(state, "not enforced") || !strings.Contains(w, "does not enforce NetworkPolicies") ||
			!strings.Contains(w, "network.mode none or egress") || !strings.Contains(w, "Calico") {
			t.Fatalf("bridge plugin: state %q, warning %q", state, w)
		}
	}
	e.close()
	checkNoKubeLeaks(t)
}

// TestKubernetesWatchOwned: the pod watch starts with the first machine (not before) and ends with the
// server.
func TestKubernetesWatchOwned(t *testing.T) {
	requireKubernetes(t)
	e := newTestServer(t, withHostEnv)
	k := e.s.computers.providerByName("kubernetes").(*kubeProvider)
	if k.watching() {
		t.Fatal("a watch before any kubernetes machine")
	}
	m := e.create(map[string]any{"provider": "kubernetes", "network": map[string]any{"mode": "full"}})
	if !k.watching() {
		t.Fatal("no watch with a kubernetes machine")
	}
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	e.close()
	select {
	case <-k.watch.done:
	default:
		t.Fatal("the watch goroutine outlived the server's Close")
	}
	if k.watching() {
		t.Fatal("watching after Close")
	}
}

// TestKubeGone: which watch events are a machine's pod gone behind agentd's back.
func TestKubeGone(t *testing.T) {
	ev := func(typ, phase, deleting string) kubeWatchEvent {
		var e kubeWatchEvent
		e.Type, e.Object.Status.Phase, e.Object.Metadata.DeletionTimestamp = typ, phase, deleting
		return e
	}
	for _, c := range []struct {
		ev   kubeWatchEvent
		gone bool
	}{
		{ev("ADDED", "Running", ""), false},
		{ev("MODIFIED", "Pending", ""), false},
		{ev("MODIFIED", "Failed", "2026-11-26T11:46:33Z"), false}, // being deleted (by agentd's stop, say)
		{ev("MODIFIED", "Failed", ""), true},                      // evicted
		{ev("MODIFIED", "Succeeded", ""), true},
		{ev("DELETED", "Failed", "2026-11-26T11:46:33Z"), true},
	} {
		if got := kubeGone(c.ev); got != c.gone {
			t.Errorf("%+v: gone %v", c.ev, got)
		}
	}
}

// TestKubernetesAutoCPUs: with auto selecting kubernetes, a spec's cpus above this host's are the node's
// to judge (the create reaches the cluster), while docker still refuses them with a 422. No cluster needed:
// the kubeconfig points nowhere, and the probes are set.
func TestKubernetesAutoCPUs(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not installed")
	}
	bad := t.TempDir() + "/kubeconfig"
	os.WriteFile(bad, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster: {server: \"https://127.0.0.1:1\"}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: x, user: u}\ncurrent-context: x\n"), 0o600)
	e := newTestServer(t, func(c *testSetup) { c.Kubernetes = &kubeConfig{Kubeconfig: bad} })
	c := e.s.computers
	waitStartProbes(t, c)
	set := func(avail map[string]bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for name, ok := range avail {
			c.probes[name] = probeResult{available: ok, reason: "set by the test", at: time.Now()}
		}
	}
	many := runtime.NumCPU() + 1
	set(map[string]bool{"docker": false, "podman": false, "kubernetes": true})
	fakeTrials(t, c, map[string]bool{"docker": false, "podman": false, "kubernetes": true})
	env := e.wantError("POST", "/v1/computers", map[string]any{"cpus": many}, 500, codeComputerFailed)
	if msg := env["message"].(string); !strings.Contains(msg, "kubectl could not") {
		t.Fatalf("auto on kubernetes: %v", env)
	}
	set(map[string]bool{"docker": true})
	fakeTrials(t, c, map[string]bool{"docker": true})
	env = e.wantError("POST", "/v1/computers", map[string]any{"cpus": many}, 422, codeSpecInvalid)
	if !strings.Contains(env["message"].(string), "this host's") {
		t.Fatalf("auto on docker: %v", env)
	}
}
