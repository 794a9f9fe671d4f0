// hostpath-provisioner: the test cluster's dynamic volume provisioner (issue 19: agentd's `persist` is a
// PersistentVolumeClaim). A single-node cluster has no storage driver, and kube-controller-manager's own
// --enable-hostpath-provisioner does provision and reclaim (checked on v1.34.4), but it makes each volume a
// root-owned 0750 directory, and the kubelet applies no fsGroup to hostPath volumes: a pod that runs as
// uid 1000 with no capabilities (every agentd machine) cannot write its /work there. This is the
// external-provisioner protocol instead, the way rancher's local-path-provisioner works: for a claim of a
// StorageClass naming this provisioner (once the scheduler picked a node, with WaitForFirstConsumer) it
// makes a directory under --root, mode 0777, and a hostPath PersistentVolume pre-bound to the claim; the
// PV controller binds them. A Released volume of reclaim policy Delete is removed with its directory.
// Test clusters only: single node, no quota on the directory's size.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const provisionedBy = "pv.kubernetes.io/provisioned-by"

func runProvisioner(args []string) int {
	fs := flag.NewFlagSet("hostpath-provisioner", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of a user that may manage PersistentVolumes")
	root := fs.String("root", "", "directory the volumes are made in")
	name := fs.String("name", "agentd.local/hostpath", "provisioner name (a StorageClass's provisioner)")
	fs.Parse(args)
	if *root == "" || !filepath.IsAbs(*root) {
		fmt.Fprintln(os.Stderr, "hostpath-provisioner: --root must be an absolute directory")
		return 2
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostpath-provisioner:", err)
		return 1
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostpath-provisioner:", err)
		return 1
	}
	if err := os.MkdirAll(*root, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "hostpath-provisioner:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	p := &provisioner{cs: cs, root: filepath.Clean(*root), name: *name}
	fmt.Printf("hostpath-provisioner %s: volumes in %s\n", p.name, p.root)
	// A list every half second is plenty for a test cluster and needs no informer machinery.
	for t := time.NewTicker(500 * time.Millisecond); ; {
		if err := p.pass(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "hostpath-provisioner:", err)
		}
		select {
		case <-ctx.Done():
			return 0
		case <-t.C:
		}
	}
}

type provisioner struct {
	cs   kubernetes.Interface
	root string
	name string
}

func (p *provisioner) pass(ctx context.Context) error {
	classes, err := p.cs.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	mine := map[string]storagev1.StorageClass{}
	for _, c := range classes.Items {
		if c.Provisioner == p.name {
			mine[c.Name] = c
		}
	}
	claims, err := p.cs.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.Spec.StorageClassName == nil || c.Spec.VolumeName != "" || c.Status.Phase != v1.ClaimPending || c.DeletionTimestamp != nil {
			continue
		}
		class, ok := mine[*c.Spec.StorageClassName]
		if !ok {
			continue
		}
		node := c.Annotations["volume.kubernetes.io/selected-node"]
		if class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer && node == "" {
			continue // the scheduler has not placed the claim's first pod yet
		}
		if err := p.provision(ctx, c, &class, node); err != nil {
			fmt.Fprintf(os.Stderr, "hostpath-provisioner: claim %s/%s: %v\n", c.Namespace, c.Name, err)
		}
	}
	vols, err := p.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range vols.Items {
		v := &vols.Items[i]
		if v.Annotations[provisionedBy] != p.name || v.Status.Phase != v1.VolumeReleased ||
			v.Spec.PersistentVolumeReclaimPolicy != v1.PersistentVolumeReclaimDelete {
			continue
		}
		if err := p.remove(ctx, v); err != nil {
			fmt.Fprintf(os.Stderr, "hostpath-provisioner: volume %s: %v\n", v.Name, err)
		}
	}
	return nil
}

func (p *provisioner) provision(ctx context.Context, c *v1.PersistentVolumeClaim, class *storagev1.StorageClass, node string) error {
	name := "pvc-" + string(c.UID)
	dir := filepath.Join(p.root, name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o777); err != nil { // past the umask: the pod's user is not root
		return err
	}
	reclaim := v1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		reclaim = *class.ReclaimPolicy
	}
	hostDir := v1.HostPathDirectory
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{provisionedBy: p.name}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: c.Spec.Resources.Requests[v1.ResourceStorage]},
			AccessModes:                   c.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              class.Name,
			ClaimRef:                      &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			PersistentVolumeSource:        v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir, Type: &hostDir}},
		},
	}
	if node != "" {
		pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
		}}}}
	}
	if _, err := p.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	fmt.Printf("provisioned %s for %s/%s in %s\n", name, c.Namespace, c.Name, dir)
	return nil
}

func (p *provisioner) remove(ctx context.Context, v *v1.PersistentVolume) error {
	if v.Spec.HostPath != nil {
		dir := filepath.Clean(v.Spec.HostPath.Path)
		if !strings.HasPrefix(dir, p.root+string(filepath.Separator)) {
			return fmt.Errorf("%s is not under %s: left alone", dir, p.root)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := p.cs.CoreV1().PersistentVolumes().Delete(ctx, v.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	fmt.Printf("removed %s\n", v.Name)
	return nil
}
