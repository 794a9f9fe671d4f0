#!/usr/bin/env bash
# agentd CI (issue 19), adapted from ../shared/k8s-local: stop the cluster started by up.sh; kills only processes recorded in pid files
# (plus the containerd shims/containers of *our* containerd socket). `down.sh --purge` also wipes state.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="${K8S_LOCAL_BIN:-$HERE/bin}"
STATE="${K8S_LOCAL_STATE:-/var/lib/agentd-k8s}"
RUN="${K8S_LOCAL_RUN:-/run/agentd-k8s}"
CSOCK="$RUN/containerd/containerd.sock"
export PATH="$BIN:$PATH"

stop() { # name
  local f="$RUN/pids/$1.pid" pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"; for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "stopped $1 ($pid)"
  fi
  rm -f "$f"
}

# graceful path: let kubelet/CRI tear pods down (stops containers, CNI teardown, unmounts)
KCFG="$STATE/admin.kubeconfig"
if [[ -f $KCFG ]] && kubectl --kubeconfig "$KCFG" get --raw /readyz >/dev/null 2>&1; then
  kubectl --kubeconfig "$KCFG" delete pods --all --all-namespaces --grace-period=1 --timeout=60s --wait=true >/dev/null 2>&1 || true
fi
stop kubelet
stop hostpath-provisioner
stop kube-scheduler
stop kube-controller-manager

# remove all pod containers/sandboxes from our containerd (this also tears down CNI netns)
if [[ -S $CSOCK ]] && ctr -a "$CSOCK" version >/dev/null 2>&1; then
  for t in $(ctr -a "$CSOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -a "$CSOCK" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1
  done
  sleep 1
  for t in $(ctr -a "$CSOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -a "$CSOCK" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1
  done
  for c in $(ctr -a "$CSOCK" -n k8s.io containers ls -q 2>/dev/null); do
    ctr -a "$CSOCK" -n k8s.io containers delete "$c" >/dev/null 2>&1
  done
fi
stop containerd
# shims started by our containerd (identified by our socket address on their command line)
for p in $(pgrep -f -- "-address $CSOCK" || true); do
  [[ "$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)" == *"-address $CSOCK"* ]] && kill -9 "$p" && echo "killed shim $p"
done
stop kube-apiserver
stop etcd

# leftover mounts / netns / bridge / cgroups of ours
for m in $(awk -v s="$STATE" -v r="$RUN" '$2 ~ "^"s || $2 ~ "^"r {print $2}' /proc/self/mounts | sort -r); do
  umount -l "$m" 2>/dev/null
done
# pod netns left behind (only if the graceful path failed): cni-* netns that did not exist before up.sh
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-'); do
  grep -qx "$ns" "$RUN/netns-before" 2>/dev/null || { ip netns delete "$ns" 2>/dev/null && echo "deleted netns $ns"; }
done
ip link show k8slocal0 >/dev/null 2>&1 && ip link delete k8slocal0
while iptables -D FORWARD -i k8slocal0 -o k8slocal0 -m comment --comment agentd-k8s -j ACCEPT 2>/dev/null; do :; done # up.sh's
for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
  [[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
done
rm -rf "$STATE/cni/ipam"
rm -f /var/lib/cni/results/k8s-local-*     # libcni result cache of our network
if [[ ${1:-} == --purge ]]; then
  rm -rf "$STATE" "$RUN" && echo "purged $STATE $RUN"
  # kubelet's hard-coded container log dirs (only our kubelet uses them on this machine)
  rm -rf /var/log/pods/* /var/log/containers/*.log
  rmdir /var/log/pods /var/log/containers /var/lib/cni/results /var/lib/cni 2>/dev/null
fi
echo "down"
