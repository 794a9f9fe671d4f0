// computers_kubernetes.go — the `kubernetes` provider: a machine is one Pod, driven through `kubectl` (no
// client library), used only when config.yaml has a `kubernetes:` block.
//
// Entry points: newKubeProvider (computers.go adds it after docker and podman when configured). Every
// kubectl call goes through kubeProvider.cli (exec.CommandContext, WaitDelay, explicit argv, the
// configured --kubeconfig/--context/-n) and, when the output is wanted, kubeProvider.call, which carries
// kubectl's stderr into the error.
//
// Rules (issue 19): every object agentd applies (pod, claim, NetworkPolicy) is one template in
// kubeManifests, rendered as JSON for `kubectl apply -f -`. The Pod is labelled agentd.id /
// agentd.owner / agentd.provider; it runs as uid 1000 (runAsNonRoot), no privilege escalation, every
// capability dropped, RuntimeDefault seccomp, a read-only root with emptyDirs for /work, /tmp and the
// helper (/.agentd), no service-account token, limits from cpus/memoryMb/diskMb and requests a tenth of
// them (machines pack onto nodes the way containers share a docker host). `network.mode: none` and
// `egress` add a deny-all NetworkPolicy (whether the cluster enforces it: computers_kubernetes_netcheck.go).
// `persist` makes /work a PersistentVolumeClaim of diskMb (kubernetes.storageClassName, else the
// cluster's default class), created before the pod, kept by stop, checked by start, removed by destroy;
// a restart finds a stopped persist machine by its claim, and an unrecorded claim of this owner is an
// orphan. create waits for Ready (`kubectl wait`) and fails with the pod's (or the claim's) events when
// it cannot get there (image missing, unschedulable, no class or provisioner). stop deletes the pod,
// start applies it again (without persist a fresh /work, as docker's tmpfs), destroy removes pod, policy
// and claim in one call. A pod deleted or ended behind agentd's back turns the computer stopped with a
// computer_stopped event, noticed by the reaper's pod sweep that the owner's pod watch wakes
// (computers_kubernetes_watch.go) or at the next use, whichever comes first. Exec, files and the
// terminal go over the warm exec channel (one long `kubectl exec -i` into agentd's helper, copied into
// the pod over exec at create and start: no bind mount crosses nodes), else the per-call fallback
// (computers_percall.go: one `kubectl exec` per call); ports over the channel only (computers_ports.go).
// The warm pool keeps pods too (computers_pool.go). Refused, not ignored: packages and another user
// (runAsNonRoot, no exec user in Kubernetes), host mounts (the pod's node is not this host).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"text/template"
	"time"
)

// kubeConfig is config.yaml's `kubernetes:` block.
type kubeConfig struct {
	Kubeconfig       string            `yaml:"kubeconfig"`
	Context          string            `yaml:"context"`
	Namespace        string            `yaml:"namespace"` // default agentd
	RuntimeClassName string            `yaml:"runtimeClassName"`
	NodeSelector     map[string]string `yaml:"nodeSelector"`
	Tolerations      []map[string]any  `yaml:"tolerations"` // Kubernetes' own toleration objects, passed through
	// StorageClassName is the class of a persist machine's /work claim; empty: the cluster's default class.
	StorageClassName string `yaml:"storageClassName"`
}

const (
	kubeContainer      = "machine"
	kubeRequestShare   = 10               // requests are limits / 10
	kubeReadyTimeout   = 5 * time.Minute  // a pod that is not Ready by then fails the create
	kubeScheduleGrace  = 10 * time.Second // an unschedulable pod gets this long before the create fails
	kubeDefaultNS      = "agentd"
	kubeStoppedReason  = "pod_deleted"
	kubeDeleteTimeout  = "60s"
	kubeWaitStepSecond = 2
	kubeClaimGrace     = 10 * time.Second // a claim whose binding or provisioning failed gets this long
)

type kubeProvider struct {
	cfg kubeConfig
	c   *computerService

	stopMu sync.Mutex   // markStopped, once per machine
	watch  kubeWatcher  // the owner's pod watch (computers_kubernetes_watch.go)
	net    kubeNetCheck // whether the cluster enforces NetworkPolicies (computers_kubernetes_netcheck.go)
}

func newKubeProvider(cfg kubeConfig, c *computerService) *kubeProvider {
	if cfg.Namespace == "" {
		cfg.Namespace = kubeDefaultNS
	}
	return &kubeProvider{cfg: cfg, c: c}
}

func (k *kubeProvider) meta() providerMeta {
	return providerMeta{name: "kubernetes", description: "Kubernetes pods through kubectl (kernel isolation: a container on a shared node kernel; runtimeClassName for gVisor or Kata)",
		priority: 80, isolated: true, isolationKind: "kernel"}
}

// cli is THE helper: every kubectl call is built here.
func (k *kubeProvider) cli(ctx context.Context, args ...string) *exec.Cmd {
	var a []string
	if k.cfg.Kubeconfig != "" {
		a = append(a, "--kubeconfig", k.cfg.Kubeconfig)
	}
	if k.cfg.Context != "" {
		a = append(a, "--context", k.cfg.Context)
	}
	a = append(append(a, "-n", k.cfg.Namespace), args...)
	cmd := exec.CommandContext(ctx, "kubectl", a...)
	cmd.WaitDelay = 2 * time.Second
	dieWithParent(cmd) // a long kubectl exec must not outlive a killed server
	return cmd
}

// call runs one kubectl command and returns its stdout; a failure carries kubectl's own words.
func (k *kubeProvider) call(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := k.cli(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &engineError{args: args, err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	return stdout.String(), nil
}

// pod is the machine's pod name: DNS-1123 (ids are lower-case letters, digits and one underscore).
func (k *kubeProvider) pod(m *ComputerInfo) string {
	return "agentd-" + strings.ReplaceAll(strings.ToLower(m.ID), "_", "-")
}

// ---- probe ----

// kubeVerbs are the permissions agentd needs in its namespace (README: the Role).
var kubeVerbs = [][2]string{
	{"create", "pods"}, {"get", "pods"}, {"list", "pods"}, {"watch", "pods"}, {"patch", "pods"}, {"delete", "pods"},
	{"create", "pods/exec"}, {"list", "events"},
	{"get", "networkpolicies"}, {"create", "networkpolicies"}, {"patch", "networkpolicies"}, {"delete", "networkpolicies"},
	{"create", "persistentvolumeclaims"}, {"get", "persistentvolumeclaims"}, {"list", "persistentvolumeclaims"}, {"delete", "persistentvolumeclaims"},
}

func (k *kubeProvider) probe(ctx context.Context) probeResult {
	if _, err := exec.LookPath("kubectl"); err != nil {
		return probeResult{reason: "the kubectl CLI is not installed", hint: "install kubectl (https://kubernetes.io/docs/tasks/tools/) on agentd's PATH"}
	}
	out, err := k.call(ctx, nil, "version", "-o", "json")
	var v struct {
		Server struct {
			GitVersion string `json:"gitVersion"`
		} `json:"serverVersion"`
	}
	json.Unmarshal([]byte(out), &v)
	if err != nil || v.Server.GitVersion == "" {
		msg := "no server version"
		if err != nil {
			msg = firstLine(err.Error())
		}
		return probeResult{reason: "the Kubernetes API server is not reachable: " + msg,
			hint: "check kubernetes.kubeconfig and kubernetes.context in config.yaml (now " + firstNonEmpty(k.cfg.Kubeconfig, "$KUBECONFIG or ~/.kube/config") + ", " + takesEffect("kubernetes") + "); `kubectl version` must show a server"}
	}
	if _, err := k.call(ctx, nil, "get", "namespace", k.cfg.Namespace, "-o", "name"); err != nil {
		low := strings.ToLower(err.Error())
		if strings.Contains(low, "notfound") || strings.Contains(low, "not found") {
			return probeResult{reason: fmt.Sprintf("the namespace %q does not exist", k.cfg.Namespace),
				hint: fmt.Sprintf("kubectl create namespace %s (or set kubernetes.namespace in config.yaml, %s)", k.cfg.Namespace, takesEffect("kubernetes"))}
		} // forbidden: a namespaced Role cannot read namespaces; the can-i checks below still judge it
	}
	// One `auth can-i --list` (a rules review) answers for every verb it shows; a verb it does not show
	// (an authorizer that is not RBAC may not list its rules) is asked with its own `auth can-i`, four at
	// a time. Only an answer "no" is a missing right; a check that did not answer fails the probe as such.
	list, _ := k.call(ctx, nil, "auth", "can-i", "--list")
	var wg sync.WaitGroup
	missing, failed := make([]string, len(kubeVerbs)), make([]string, len(kubeVerbs))
	sem := make(chan struct{}, 4)
	for i, vr := range kubeVerbs {
		if canIList(list, vr[0], vr[1]) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ans, err := k.call(ctx, nil, "auth", "can-i", vr[0], vr[1])
			switch strings.TrimSpace(ans) {
			case "yes":
			case "no":
				missing[i] = vr[0] + " " + vr[1]
			default:
				failed[i] = fmt.Sprintf("%s %s: %v", vr[0], vr[1], err)
			}
		}()
	}
	wg.Wait()
	empty := func(s string) bool { return s == "" }
	if failed = slices.DeleteFunc(failed, empty); len(failed) > 0 {
		return probeResult{reason: "kubectl auth can-i did not answer: " + firstLine(failed[0]),
			hint: "check the cluster's API server and agentd's credentials (`kubectl auth can-i create pods -n " + k.cfg.Namespace + "`)"}
	}
	if missing = slices.DeleteFunc(missing, empty); len(missing) > 0 {
		return probeResult{reason: fmt.Sprintf("kubectl may not %s in namespace %s", strings.Join(missing, ", "), k.cfg.Namespace),
			hint: "bind agentd's user to a Role with these verbs (README: Kubernetes); `kubectl auth can-i --list -n " + k.cfg.Namespace + "` shows what it has"}
	}
	return probeResult{available: true, version: v.Server.GitVersion}
}

// canIList says whether `kubectl auth can-i --list` (its table: resource, URLs, names, [verbs]) grants
// verb on resource ("pods", "pods/exec", "networkpolicies" shown as networkpolicies.networking.k8s.io).
func canIList(table, verb, resource string) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(line, " ") {
			continue
		}
		res, _, _ := strings.Cut(f[0], ".") // the group, if any, follows the first dot
		if res != resource && res != "*" {
			continue
		}
		i := strings.LastIndex(line, "[")
		verbs := strings.Fields(strings.Trim(line[i:], "[] \t"))
		if slices.Contains(verbs, verb) || slices.Contains(verbs, "*") {
			return true
		}
	}
	return false
}

func (k *kubeProvider) supports(sp ComputerSpec) error {
	refuse := func(what, hint string) error {
		return errorf(codeNotImplemented, "the kubernetes provider cannot honour %s", what).withHint(hint)
	}
	switch {
	case len(sp.Packages) > 0:
		return refuse("packages", "pods run as a non-root user on a read-only root: build an image with them and set images: {<flavor>: <image>} in config.yaml")
	case sp.User != "" && sp.User != "1000:1000" && sp.User != "1000":
		return refuse("user", "pods run as 1000:1000 (runAsNonRoot); omit user")
	case len(sp.Mounts) > 0:
		return refuse("mounts", "a pod's node is not this host; upload files with the upload endpoint instead")
	}
	return nil
}

// ---- lifecycle ----

// podJSON is the machine's Pod.
func (k *kubeProvider) podJSON(m *ComputerInfo) ([]byte, error) {
	labels := map[string]string{"agentd.id": m.ID, "agentd.owner": k.c.owner, "agentd.provider": "kubernetes", "app.kubernetes.io/managed-by": "agentd"}
	for key, v := range m.Spec.Labels {
		labels["agentd.label."+key] = v
	}
	if m.State == statePooled {
		labels["agentd.pool"] = m.Spec.Flavor
	}
	return k.podDoc(k.pod(m), labels, m)
}

// kubeManifests are every object agentd applies, written as kubectl receives them: a Pod (a machine's, or
// one of the network-policy check's), a persist machine's claim for /work, and the deny-all
// NetworkPolicy. Each value from a spec or the config goes in through json, as one JSON value, so none
// can add a field or leave its place. Requests are a tenth of the limits (Req).
var kubeManifests = template.Must(template.New("kube").Funcs(template.FuncMap{"json": func(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}}).Parse(`
{{- define "metadata"}}"metadata": {"name": {{json .Name}}, "namespace": {{json .Namespace}}, "labels": {{json .Labels}}}{{end}}

{{- define "pod"}}{"apiVersion": "v1", "kind": "Pod", {{template "metadata" .}},
  "spec": {
    "restartPolicy": "Never", "automountServiceAccountToken": false, "enableServiceLinks": false,
    "terminationGracePeriodSeconds": 1, "hostname": "machine",
    "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": true, "fsGroup": 1000,
      "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{
      "name": {{json .Container}}, "image": {{json .Image}}, "imagePullPolicy": "IfNotPresent",
      "command": ["sleep", "infinity"], "env": {{json .Env}},
      "resources": {
        "limits": {"cpu": "{{.MilliCPU}}m", "memory": "{{.MemoryMB}}Mi", "ephemeral-storage": "{{.DiskMB}}Mi"},
        "requests": {"cpu": "{{.Req .MilliCPU}}m", "memory": "{{.Req .MemoryMB}}Mi", "ephemeral-storage": "{{.Req .DiskMB}}Mi"}},
      "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "privileged": false,
        "capabilities": {"drop": ["ALL"]}},
      "volumeMounts": [{"name": "work", "mountPath": "/work"}, {"name": "tmp", "mountPath": "/tmp"},
        {"name": "agentd", "mountPath": "/.agentd"}]}],
    "volumes": [
      {{- if .Claim}}{"name": "work", "persistentVolumeClaim": {"claimName": {{json .Claim}}}}
      {{- else}}{"name": "work", "emptyDir": {"sizeLimit": "{{.DiskMB}}Mi"}}{{end}},
      {"name": "tmp", "emptyDir": {"sizeLimit": "512Mi"}},
      {"name": "agentd", "emptyDir": {"sizeLimit": "256Mi"}}]
    {{- with .Cfg.RuntimeClassName}}, "runtimeClassName": {{json .}}{{end}}
    {{- with .Cfg.NodeSelector}}, "nodeSelector": {{json .}}{{end}}
    {{- with .Cfg.Tolerations}}, "tolerations": {{json .}}{{end}}}}
{{end}}

{{- define "claim"}}{"apiVersion": "v1", "kind": "PersistentVolumeClaim", {{template "metadata" .}},
  "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "{{.DiskMB}}Mi"}}
    {{- with .Cfg.StorageClassName}}, "storageClassName": {{json .}}{{end}}}}
{{end}}

{{- define "policy"}}{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", {{template "metadata" .}},
  "spec": {"podSelector": {"matchLabels": {{json .Match}}}, "policyTypes": ["Ingress", "Egress"]}}
{{end}}`))

// kubeObject is what kubeManifests fill in.
type kubeObject struct {
	Name, Namespace, Image, Claim string
	Labels, Match                 map[string]string
	Env                           []map[string]string
	MilliCPU, MemoryMB, DiskMB    int
	Cfg                           kubeConfig
}

func (kubeObject) Container() string { return kubeContainer }

// Req is the request for a limit of n: a tenth (kubeRequestShare), at least 1.
func (kubeObject) Req(n int) int { return max(n/kubeRequestShare, 1) }

// manifest renders one of kubeManifests for name, in the provider's namespace.
func (k *kubeProvider) manifest(kind, name string, o kubeObject) ([]byte, error) {
	o.Name, o.Namespace, o.Cfg = name, k.cfg.Namespace, k.cfg
	var b bytes.Buffer
	err := kubeManifests.ExecuteTemplate(&b, kind, o)
	return b.Bytes(), err
}

// podDoc is a Pod named name running m's image and spec with agentd's hardening (machines, and the
// network-policy probe's pods). A persist machine's /work is its claim (claimJSON), else an emptyDir.
func (k *kubeProvider) podDoc(name string, labels map[string]string, m *ComputerInfo) ([]byte, error) {
	sp := m.Spec
	env := []map[string]string{}
	if _, ok := sp.Env["HOME"]; !ok {
		env = append(env, map[string]string{"name": "HOME", "value": "/work"})
	}
	for _, key := range slices.Sorted(maps.Keys(sp.Env)) {
		env = append(env, map[string]string{"name": key, "value": sp.Env[key]})
	}
	o := kubeObject{Image: m.Image, Labels: labels, Env: env, MilliCPU: int(sp.CPUs * 1000), MemoryMB: sp.MemoryMB, DiskMB: sp.DiskMB}
	if sp.Persist {
		o.Claim = k.pod(m)
	}
	return k.manifest("pod", name, o)
}

// claimJSON is a persist machine's PersistentVolumeClaim for /work: diskMb of the configured class (or
// the cluster's default one), named and labelled like its pod, so a restart finds it by owner and it
// outlives the pod (stop) until destroy.
func (k *kubeProvider) claimJSON(m *ComputerInfo) ([]byte, error) {
	return k.manifest("claim", k.pod(m), kubeObject{DiskMB: m.Spec.DiskMB,
		Labels: map[string]string{"agentd.id": m.ID, "agentd.owner": k.c.owner, "agentd.provider": "kubernetes", "app.kubernetes.io/managed-by": "agentd"}})
}

// policyDoc is agentd's deny-all NetworkPolicy: no ingress and no egress for the pods matching match.
func (k *kubeProvider) policyDoc(name string, labels, match map[string]string) ([]byte, error) {
	return k.manifest("policy", name, kubeObject{Labels: labels, Match: match})
}

// policyJSON is the deny-all NetworkPolicy of a machine with no route of its own (`none`, and `egress`,
// whose one way out is agentd's proxy over the exec channel: kubectl exec, not the pod network).
func (k *kubeProvider) policyJSON(m *ComputerInfo) ([]byte, error) {
	return k.policyDoc(k.pod(m), map[string]string{"agentd.id": m.ID, "agentd.owner": k.c.owner}, map[string]string{"agentd.id": m.ID})
}

func (k *kubeProvider) create(ctx context.Context, m *ComputerInfo) error {
	k.ensureWatch()
	if m.Spec.Persist {
		doc, _ := k.claimJSON(m)
		if _, err := k.call(ctx, bytes.NewReader(doc), "create", "-f", "-"); err != nil {
			return errorf(codeComputerFailed, "kubectl could not create the machine's PersistentVolumeClaim: %s", err.Error()).
				withHint("check the persistentvolumeclaims verbs of agentd's Role and the namespace's storage quota")
		}
	}
	if err := k.applyPolicy(ctx, m); err != nil {
		return err
	}
	return k.run(ctx, m)
}

// applyPolicy applies the deny-all NetworkPolicy of a machine with no route of its own; it must exist
// before the pod does.
func (k *kubeProvider) applyPolicy(ctx context.Context, m *ComputerInfo) error {
	if !noRoute(m.Spec) {
		return nil
	}
	doc, _ := k.policyJSON(m)
	if _, err := k.call(ctx, bytes.NewReader(doc), "apply", "-f", "-"); err != nil {
		return errorf(codeComputerFailed, "kubectl could not apply the machine's NetworkPolicy: %s", err.Error()).
			withHint("check the networkpolicies verbs of agentd's Role")
	}
	return nil
}

// run applies the pod, waits for it to be Ready, and brings in the helper and the workdir.
func (k *kubeProvider) run(ctx context.Context, m *ComputerInfo) error {
	doc, err := k.podJSON(m)
	if err != nil {
		return err
	}
	if _, err := k.call(ctx, bytes.NewReader(doc), "apply", "-f", "-"); err != nil {
		return errorf(codeComputerFailed, "kubectl could not create the machine's pod: %s", err.Error()).
			withHint("run `kubectl auth can-i create pods -n " + k.cfg.Namespace + "` and check the namespace's quota")
	}
	if err := k.waitReady(ctx, m); err != nil {
		return err
	}
	if err := k.copyHelper(ctx, m); err != nil {
		return err
	}
	if m.Spec.Persist { // a claim's volume is writable by uid 1000 only where its driver applies fsGroup
		if out, err := k.call(ctx, nil, "exec", k.pod(m), "-c", kubeContainer, "--", "/bin/sh", "-c", `test -w /work || { ls -ldn /work; exit 3; }`); err != nil {
			return errorf(codeComputerFailed, "the machine's /work (its PersistentVolumeClaim) is not writable by uid 1000 (%s): %s", strings.TrimSpace(out), err.Error()).
				withHint("use a StorageClass whose volumes honour the pod's fsGroup (most CSI block drivers do; hostPath and many NFS setups do not): kubernetes.storageClassName in config.yaml, " + takesEffect("kubernetes"))
		}
	}
	if m.Workdir != "/work" && m.Workdir != "/tmp" {
		if _, err := k.call(ctx, nil, "exec", k.pod(m), "-c", kubeContainer, "--", "mkdir", "-p", "--", m.Workdir); err != nil {
			return errorf(codeComputerFailed, "cannot create the workdir %s: %s", m.Workdir, err.Error()).withHint("use a workdir under /work or /tmp")
		}
	}
	return nil
}

// kubePod is the part of a Pod's status agentd reads (and of a claim's, in owned's mixed list).
type kubePod struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name              string            `json:"name"`
		Labels            map[string]string `json:"labels"`
		DeletionTimestamp string            `json:"deletionTimestamp"`
	} `json:"metadata"`
	Status struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
		ContainerStatuses []struct {
			State struct {
				Waiting *struct {
					Reason  string `json:"reason"`
					Message string `json:"message"`
				} `json:"waiting"`
				Terminated *struct {
					Reason   string `json:"reason"`
					ExitCode int    `json:"exitCode"`
				} `json:"terminated"`
			} `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// kubeFatalWaits are container states that do not get better by waiting.
var kubeFatalWaits = []string{"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff"}

// waitReady waits with `kubectl wait` in short steps and, between them, reads the pod: a fatal container
// state, or a pod unschedulable past kubeScheduleGrace, fails at once with the pod's events.
func (k *kubeProvider) waitReady(ctx context.Context, m *ComputerInfo) error {
	return k.waitReadyPod(ctx, k.pod(m), m)
}

// waitReadyPod is waitReady for pod name running m's image and spec (a machine's, or a probe pod's).
func (k *kubeProvider) waitReadyPod(ctx context.Context, name string, m *ComputerInfo) error {
	t0 := time.Now()
	for {
		_, err := k.call(ctx, nil, "wait", "--for=condition=Ready", "pod/"+name, fmt.Sprintf("--timeout=%ds", kubeWaitStepSecond))
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errorf(codeComputerFailed, "the machine's pod was not Ready in time: %s", firstNonEmpty(k.eventsOf(context.WithoutCancel(ctx), "Pod", name, false), "(none)")).
				withHint("kubectl describe pod " + name + " -n " + k.cfg.Namespace)
		}
		if !strings.Contains(err.Error(), "timed out") { // not the step's timeout: kubectl itself failed
			return errorf(codeComputerFailed, "kubectl wait for the machine's pod failed: %s", err.Error()).
				withHint("check the watch verb on pods of agentd's Role")
		}
		out, gerr := k.call(ctx, nil, "get", "pod", name, "-o", "json")
		var p kubePod
		if gerr != nil || json.Unmarshal([]byte(out), &p) != nil {
			continue
		}
		why := ""
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && slices.Contains(kubeFatalWaits, w.Reason) {
				why = w.Reason + ": " + w.Message
			}
			if t := cs.State.Terminated; t != nil {
				why = fmt.Sprintf("the container ended (%s, exit %d)", t.Reason, t.ExitCode)
			}
		}
		for _, cnd := range p.Status.Conditions {
			// An unbound claim (Immediate binding) is judged by the claim's own events below: a provisioner
			// may take longer than the grace.
			if cnd.Type == "PodScheduled" && cnd.Status == "False" && cnd.Reason == "Unschedulable" && time.Since(t0) > kubeScheduleGrace &&
				!strings.Contains(cnd.Message, "PersistentVolumeClaim") {
				why = "Unschedulable: " + cnd.Message
			}
		}
		claim := ""
		if why == "" && m.Spec.Persist && time.Since(t0) > kubeClaimGrace {
			if claim = k.eventsOf(ctx, "PersistentVolumeClaim", name, true); claim != "" {
				why = "its PersistentVolumeClaim " + name + " was not bound: " + claim
			}
		}
		if p.Status.Phase == "Failed" && why == "" {
			why = "the pod failed"
		}
		if why == "" && time.Since(t0) < kubeReadyTimeout {
			continue
		}
		if why == "" {
			why = "not Ready after " + kubeReadyTimeout.String()
		}
		hint := "kubectl describe pod " + name + " -n " + k.cfg.Namespace
		switch {
		case claim != "":
			hint = "set kubernetes.storageClassName in config.yaml to a StorageClass of the cluster (kubectl get storageclass), " + takesEffect("kubernetes") + ", or mark one the default; kubectl describe pvc " + name + " -n " + k.cfg.Namespace
		case strings.Contains(why, "Image") || strings.Contains(why, "image"):
			hint = fmt.Sprintf("make the image %s pullable by the cluster's nodes (or present on them), or point the flavor at one in config.yaml: images: {%s: <image>}, %s", m.Image, firstNonEmpty(m.Spec.Flavor, "base"), takesEffect("images"))
		case strings.HasPrefix(why, "Unschedulable"):
			hint = "ask for fewer cpus or less memory (requests are a tenth of them), or add nodes; check kubernetes.nodeSelector and tolerations"
		}
		return errorf(codeComputerFailed, "the machine's pod did not become Ready: %s; events: %s", why, firstNonEmpty(k.eventsOf(context.WithoutCancel(ctx), "Pod", name, false), "(none)")).
			withHint(hint).withDetail("pod", name)
	}
}

// eventsOf are an object's last events (only its warnings with warnings set), "Reason: message; ...";
// "" when there are none.
func (k *kubeProvider) eventsOf(ctx context.Context, kind, name string, warnings bool) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sel := "involvedObject.kind=" + kind + ",involvedObject.name=" + name
	if warnings {
		sel += ",type=Warning"
	}
	out, err := k.call(ctx, nil, "get", "events", "--field-selector", sel, "-o", "json")
	var list struct {
		Items []struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"items"`
	}
	if err != nil || json.Unmarshal([]byte(out), &list) != nil {
		if warnings { // not a reason to fail anything
			return ""
		}
		return "(the " + strings.ToLower(kind) + "'s events could not be read)"
	}
	var s []string
	for _, it := range list.Items {
		line := it.Reason + ": " + strings.TrimSpace(it.Message)
		if !slices.Contains(s, line) {
			s = append(s, line)
		}
	}
	if len(s) > 6 {
		s = s[len(s)-6:]
	}
	return strings.Join(s, "; ")
}

// copyHelper writes agentd's binary into the pod's /.agentd emptyDir over one exec (there is no bind
// mount across nodes). With the channel off there is nothing to copy.
func (k *kubeProvider) copyHelper(ctx context.Context, m *ComputerInfo) error {
	if k.c.helper == "" {
		return nil
	}
	if err := k.copyHelperTo(ctx, k.pod(m)); err != nil { // the per-call path still works: the machine runs, without its channel
		k.c.log.Warn("computers: cannot copy the helper into the pod", "computer", m.ID, "err", err)
	}
	return nil
}

// copyHelperTo writes the helper into pod name's /.agentd.
func (k *kubeProvider) copyHelperTo(ctx context.Context, name string) error {
	f, err := os.Open(k.c.helper)
	if err != nil {
		return fmt.Errorf("cannot read agentd's helper binary: %v", err)
	}
	defer f.Close()
	tmp := helperInMachine + ".part"
	_, err = k.call(ctx, f, "exec", "-i", name, "-c", kubeContainer, "--", "/bin/sh", "-c",
		`cat > `+tmp+` && chmod 755 `+tmp+` && mv -f `+tmp+` `+helperInMachine)
	return err
}

func (k *kubeProvider) start(ctx context.Context, m *ComputerInfo) error {
	k.ensureWatch()
	if m.Spec.Persist { // a pod on a missing claim would wait for it forever
		out, err := k.call(ctx, nil, "get", "pvc", k.pod(m), "--ignore-not-found", "-o", "name")
		if err != nil {
			return errorf(codeComputerFailed, "kubectl could not read the machine's PersistentVolumeClaim: %s", err.Error()).withHint("check the cluster")
		}
		if strings.TrimSpace(out) == "" {
			return errorf(codeComputerFailed, "the machine's PersistentVolumeClaim %s was deleted outside agentd: its /work is gone", k.pod(m)).
				withHint("delete this computer and create a new one")
		}
	}
	if err := k.applyPolicy(ctx, m); err != nil {
		return err
	}
	if err := k.run(ctx, m); err != nil {
		k.deletePod(context.WithoutCancel(ctx), m)
		return err
	}
	return nil
}

func (k *kubeProvider) deletePod(ctx context.Context, m *ComputerInfo) error {
	_, err := k.call(ctx, nil, "delete", "pod", k.pod(m), "--ignore-not-found", "--wait=true", "--grace-period=1", "--timeout="+kubeDeleteTimeout)
	return err
}

func (k *kubeProvider) stop(ctx context.Context, m *ComputerInfo) error {
	if err := k.deletePod(ctx, m); err != nil {
		return errorf(codeComputerFailed, "kubectl could not delete the machine's pod: %s", err.Error()).withHint("check the cluster")
	}
	return nil
}

// destroy removes the pod, its NetworkPolicy and its claim (whichever exist: an orphan's spec is not
// known) in one kubectl call, and waits until they are gone.
func (k *kubeProvider) destroy(ctx context.Context, m *ComputerInfo) error {
	n := k.pod(m)
	_, err := k.call(ctx, nil, "delete", "pod/"+n, "networkpolicy/"+n, "pvc/"+n, "--ignore-not-found", "--wait=true", "--grace-period=1", "--timeout="+kubeDeleteTimeout)
	if err != nil {
		return errorf(codeComputerFailed, "kubectl could not delete the machine's pod, policy or claim: %s", err.Error()).withHint("check the cluster")
	}
	return nil
}

// getPod reads the machine's pod; nil, nil when there is none.
func (k *kubeProvider) getPod(ctx context.Context, m *ComputerInfo) (*kubePod, error) {
	out, err := k.call(ctx, nil, "get", "pod", k.pod(m), "--ignore-not-found", "-o", "json")
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(out) == "" {
		return nil, nil
	}
	var p kubePod
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// status: no pod is "stopped" for a recorded machine (a stopped machine has none; a running one whose pod
// was deleted behind agentd's back becomes stopped here, with an event), "missing" for any other.
func (k *kubeProvider) status(ctx context.Context, m *ComputerInfo) (string, error) {
	p, err := k.getPod(ctx, m)
	if err != nil {
		return "", err
	}
	if p != nil && p.Status.Phase == "Running" && p.Metadata.DeletionTimestamp == "" {
		return "running", nil
	}
	switch m.State {
	case stateRunning:
		k.markStopped(ctx, m, p)
	case stateStopped:
	default: // no record of a machine that may be stopped (an orphan, a pool machine): it is gone
		if p == nil {
			return "missing", nil
		}
	}
	return "stopped", nil
}

// markStopped records that a running machine's pod is gone (or ended) behind agentd's back. The pod
// watch and a failed exec may both find it: stopMu and the record read again make it happen once.
func (k *kubeProvider) markStopped(ctx context.Context, m *ComputerInfo, p *kubePod) {
	k.stopMu.Lock()
	defer k.stopMu.Unlock()
	if cur, err := k.c.store.GetComputer(ctx, m.ID); err == nil && cur.State != stateRunning {
		m.State, m.Ports, m.Error = cur.State, cur.Ports, cur.Error
		return
	}
	reason, msg := kubeStoppedReason, "the machine's pod was deleted outside agentd"
	if p != nil { // an ended (or terminating) pod cannot be restarted: remove it so start can apply it again
		if p.Metadata.DeletionTimestamp == "" {
			reason, msg = kubeEndedReason, "the machine's pod ended outside agentd (phase "+p.Status.Phase+")"
		}
		k.deletePod(context.WithoutCancel(ctx), m)
	}
	rt := k.c.runtime(m.ID)
	k.c.closePorts(rt)
	k.c.closeChannel(rt)
	m.State, m.Ports, m.Error = stateStopped, map[string]PortBinding{}, msg
	k.c.save(ctx, m)
	k.c.log.Warn("computers: "+msg, "computer", m.ID, "pod", k.pod(m))
	k.c.hub.publish("computers", "computer_stopped", map[string]any{"id": m.ID, "computerId": m.ID, "name": m.Name, "reason": reason})
}

// owned lists this owner's pods (id → running) and claims (a stopped persist machine is its claim) and,
// since a machine without persist has nothing in the cluster once its pod is gone, its running or stopped
// record (a running one whose pod went while agentd was down is then stopped, as a pod deleted behind
// agentd's back is while it runs).
func (k *kubeProvider) owned(ctx context.Context) (map[string]bool, error) {
	k.ensureWatch()
	out, err := k.call(ctx, nil, "get", "pods,pvc", "-l", "agentd.owner="+k.c.owner, "-o", "json")
	if err != nil {
		return nil, err
	}
	var list struct{ Items []kubePod }
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("kubectl get pods,pvc: %v", err)
	}
	res := map[string]bool{}
	for _, p := range list.Items {
		id := p.Metadata.Labels["agentd.id"]
		switch {
		case id == "": // the network-policy probe's pods: not machines
		case p.Kind == "Pod":
			res[id] = p.Status.Phase == "Running" && p.Metadata.DeletionTimestamp == ""
		default: // a claim: the machine exists, stopped unless its pod runs
			if _, ok := res[id]; !ok {
				res[id] = false
			}
		}
	}
	recs, err := k.c.store.ListComputers(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range recs {
		if _, ok := res[m.ID]; !ok && m.Provider == "kubernetes" && (m.State == stateStopped || m.State == stateRunning) && !m.Spec.Persist {
			res[m.ID] = false
		}
	}
	return res, nil
}

// ---- exec ----

// execArgs is `kubectl exec` into the machine's container.
func (k *kubeProvider) execArgs(m *ComputerInfo, interactive, tty bool) []string {
	a := []string{"exec"}
	if interactive {
		a = append(a, "-i")
	}
	if tty {
		a = append(a, "-t")
	}
	return append(a, k.pod(m), "-c", kubeContainer, "--")
}

// envArgs prefixes argv with `env -- K=V ...` (sorted, so the argv is stable).
func envArgs(env map[string]string) []string {
	if len(env) == 0 {
		return nil
	}
	keys := make([]string, 0, len(env))
	for key := range env {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	a := []string{"env", "--"}
	for _, key := range keys {
		a = append(a, key+"="+env[key])
	}
	return a
}

func (k *kubeProvider) command(ctx context.Context, m *ComputerInfo, p *procSpec) (*procHandle, error) {
	if p.user != "" && p.user != machineUser(m) && p.user != "1000" {
		return nil, errorf(codeNotImplemented, "the kubernetes provider cannot run a command as another user").
			withHint("omit user: pods run as 1000:1000 (runAsNonRoot) and kubectl exec has no user option")
	}
	p.user = "" // the pod's own
	return k.c.machineCommand(ctx, k, m, p), nil
}

// perCallCmd is the fallback's host process (computers_percall.go): one `kubectl exec`, which has no -w,
// -e or -u: the env through `env --`, the cwd through a cd first, -t only on a host terminal (ExecTTY).
func (k *kubeProvider) perCallCmd(ctx context.Context, m *ComputerInfo, p *procSpec, argv []string) *exec.Cmd {
	a := append(k.execArgs(m, p.stdin != nil || p.term != nil, p.term != nil), envArgs(p.env)...)
	a = append(a, "/bin/sh", "-c", `cd -- "$1" 2>/dev/null || { echo "cannot enter the working directory $1" >&2; exit 126; }; shift; exec "$@"`, "agentd", p.cwd)
	return k.cli(ctx, append(a, argv...)...)
}

// helperCmd is the channel's process: one long `kubectl exec -i` into the copied helper.
func (k *kubeProvider) helperCmd(ctx context.Context, m *ComputerInfo) *exec.Cmd {
	return k.cli(ctx, append(k.execArgs(m, true, false), helperInMachine, "machine-helper")...)
}

func (k *kubeProvider) killLeftovers(ctx context.Context, m *ComputerInfo) int {
	return k.c.killLeftovers(ctx, k, m)
}

func (k *kubeProvider) fs(m *ComputerInfo) machineFS { return &engineFS{pc: k, c: k.c, host: k, m: m} }

// close ends the pod watch and the network-policy check (the service's Close).
func (k *kubeProvider) close() {
	k.stopWatch()
	k.stopNetCheck()
}
