package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
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

// checkNoKubeLeaks: after the suite no pod of this test process's owners is left in the cluster.
func checkNoKubeLeaks(t *testing.T) {
	if os.Getenv("AGENT_TEST_K8S") != "1" {
		return
	}
	out, err := kubectlTest(t, "get", "pods", "-l", "agentd.id", "-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.agentd\.owner}{"\n"}{end}`)
	if err != nil {
		t.Errorf("kubectl get pods: %v: %s", err, out)
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[1], testOwnerPrefix()) {
			t.Errorf("kubernetes: leaked pod: %s", line)
		}
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
	for _, sp := range []ComputerSpec{{Packages: []string{"jq"}}, {User: "0:0"}, {Persist: true}, {Mounts: []Mount{{Source: "/srv", Target: "/data"}}}} {
		if err := k.supports(sp); err == nil || asAPIError(err).Code != codeNotImplemented {
			t.Fatalf("%+v: %v", sp, err)
		}
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

// TestKubernetesFaults: create failures carry the pod's events; a pod deleted behind agentd's back
// leaves the computer stopped with an event, and start brings it back.
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
		e.wantError("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": "true"}, 500, codeExecFailed)
		var got ComputerInfo
		if e.call("GET", "/v1/computers/"+m.ID, nil, 200, &got); got.State != "stopped" || !strings.Contains(got.Error, "deleted outside agentd") {
			t.Fatalf("after kubectl delete pod: %+v", got)
		}
		deadline := time.After(10 * time.Second)
		for seen := false; !seen; {
			select {
			case ev := <-sub.ch:
				p, _ := ev.Payload.(map[string]any)
				seen = ev.Type == "computer_stopped" && p["computerId"] == m.ID && p["reason"] == kubeStoppedReason
			case <-deadline:
				t.Fatal("no computer_stopped event for the deleted pod")
			}
		}
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
	eventually(t, "the start's background probes", func() bool { // so none overwrites what the test sets
		c.mu.Lock()
		defer c.mu.Unlock()
		_, done := c.probes["local"] // the last provider the background reconcile probes
		return done
	})
	set := func(avail map[string]bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for name, ok := range avail {
			c.probes[name] = probeResult{available: ok, reason: "set by the test", at: time.Now()}
		}
	}
	many := runtime.NumCPU() + 1
	set(map[string]bool{"docker": false, "podman": false, "kubernetes": true})
	env := e.wantError("POST", "/v1/computers", map[string]any{"cpus": many}, 500, codeComputerFailed)
	if msg := env["message"].(string); !strings.Contains(msg, "kubectl could not") {
		t.Fatalf("auto on kubernetes: %v", env)
	}
	set(map[string]bool{"docker": true})
	env = e.wantError("POST", "/v1/computers", map[string]any{"cpus": many}, 422, codeSpecInvalid)
	if !strings.Contains(env["message"].(string), "this host's") {
		t.Fatalf("auto on docker: %v", env)
	}
}
