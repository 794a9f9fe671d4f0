#!/usr/bin/env bash
# agentd CI (issue 19), adapted from ../shared/k8s-local: bring up a single-node Kubernetes (etcd + apiserver + controller-manager + scheduler +
# kubelet on a private containerd) from locally built binaries. Loopback-only control plane.
# Idempotent: components already running (pid file + live process) are left alone.
#
# Env knobs:
#   K8S_LOCAL_BIN    dir with etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
#   K8S_LOCAL_IMAGES dir with OCI archives to import (pause.tar must provide PAUSE_IMAGE)
#   K8S_LOCAL_STATE  persistent state (default /var/lib/k8s-local)
#   K8S_LOCAL_RUN    runtime dir: pids, sockets (default /run/k8s-local)
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="${K8S_LOCAL_BIN:-$HERE/bin}"
IMAGES="${K8S_LOCAL_IMAGES:-$HERE/images}"
STATE="${K8S_LOCAL_STATE:-/var/lib/agentd-k8s}"
RUN="${K8S_LOCAL_RUN:-/run/agentd-k8s}"
CNI_BIN="${K8S_LOCAL_CNI_BIN:-/usr/lib/cni}"
CONTAINERD="${K8S_LOCAL_CONTAINERD:-/usr/bin/containerd}"
PAUSE_IMAGE="${K8S_LOCAL_PAUSE_IMAGE:-docker.io/local/pause:3.10}"
# Node name must resolve to 127.0.0.1: the apiserver reaches the kubelet (exec/port-forward/logs)
# via the node's Hostname address, and the kubelet listens on 127.0.0.1 only.
NODE_NAME="${K8S_LOCAL_NODE_NAME:-localhost}"
POD_CIDR="${K8S_LOCAL_POD_CIDR:-10.244.0.0/24}"
SVC_CIDR="10.96.0.0/24"
PKI="$STATE/pki"
LOG="$STATE/logs"
CSOCK="$RUN/containerd/containerd.sock"
KCFG="$STATE/admin.kubeconfig"
export PATH="$BIN:$PATH"

mkdir -p "$STATE" "$RUN/pids" "$PKI" "$LOG" "$STATE/etcd" "$STATE/kubelet" "$STATE/cni/net.d" "$RUN/containerd"
T0=$(date +%s.%N)
log() { awk -v a="$T0" -v b="$(date +%s.%N)" -v m="$*" 'BEGIN{printf "[up %6.1fs] %s\n", b-a, m}'; }

running() { local f="$RUN/pids/$1.pid"; [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null; }
start() { # name cmd...
  local name=$1; shift
  if running "$name"; then log "$name already running (pid $(cat "$RUN/pids/$name.pid"))"; return; fi
  setsid "$@" >>"$LOG/$name.log" 2>&1 < /dev/null &
  echo $! > "$RUN/pids/$name.pid"
  log "started $name (pid $!)"
}
wait_for() { # desc timeout cmd...
  local desc=$1 t=$2; shift 2
  for ((i = 0; i < t * 5; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "timeout waiting for $desc; the components' last log lines:" >&2
  for f in "$LOG"/*.log; do echo "--- $f" >&2; tail -n 8 "$f" >&2; done
  return 1
}

# ---------- PKI (openssl) ----------
if [[ ! -f $PKI/admin.crt ]]; then
  log "generating PKI"
  ( cd "$PKI"
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -nodes -key ca.key -subj "/CN=k8s-local-ca" -days 3650 -out ca.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    sign() { # name subj [san]
      openssl genrsa -out "$1.key" 2048 2>/dev/null
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
      local ext; ext=$(mktemp)
      { echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=${4:-clientAuth}"; [[ -n ${3:-} ]] && echo "subjectAltName=$3"; } > "$ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile "$ext" -out "$1.crt" 2>/dev/null
      rm -f "$ext" "$1.csr"
    }
    sign apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" serverAuth
    sign kubelet-serving "/CN=$NODE_NAME" "IP:127.0.0.1,DNS:localhost,DNS:$NODE_NAME" serverAuth
    sign admin "/O=system:masters/CN=kubernetes-admin"
    sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
    sign kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  )
fi
mkkcfg() { # file cert
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: "$PKI/ca.crt"}
users:
- name: u
  user: {client-certificate: "$PKI/$2.crt", client-key: "$PKI/$2.key"}
contexts:
- name: local
  context: {cluster: local, user: u}
current-context: local
EOF
}
mkkcfg "$KCFG" admin
mkkcfg "$STATE/kubelet.kubeconfig" kubelet

# ---------- etcd ----------
start etcd "$BIN/etcd" --name k8s-local --data-dir "$STATE/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster k8s-local=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
  --quota-backend-bytes 2147483648 --unsafe-no-fsync

[[ -f $RUN/netns-before ]] || { ip netns list 2>/dev/null | awk '{print $1}' > "$RUN/netns-before"; }
# ---------- containerd (private instance, not docker's) ----------
cat > "$STATE/cni/net.d/10-k8s-local.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "k8s-local", "plugins": [
  {"type": "bridge", "bridge": "k8slocal0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$STATE/cni/ipam", "ranges": [[{"subnet": "$POD_CIDR"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
EOF
cat > "$STATE/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd"
state = "$RUN/containerd/state"
[grpc]
  address = "$CSOCK"
[ttrpc]
  address = "$CSOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  enable_unprivileged_ports = true
  # this VM withholds CAP_SYS_RESOURCE: negative oom_score_adj (pause: -998) fails in runc init
  # ("can't get final child's PID from pipe: EOF"); clamp to our own oom_score_adj instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUN/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$STATE/cni/net.d"
EOF
# Pod-to-pod traffic crosses the bridge; with docker on the host (FORWARD policy DROP) and br_netfilter
# (bridge-nf-call-iptables=1) it goes through iptables' FORWARD chain and is dropped: let it through.
if command -v iptables >/dev/null && ! iptables -C FORWARD -i k8slocal0 -o k8slocal0 -m comment --comment agentd-k8s -j ACCEPT 2>/dev/null; then
  iptables -I FORWARD -i k8slocal0 -o k8slocal0 -m comment --comment agentd-k8s -j ACCEPT
fi
start containerd "$CONTAINERD" --config "$STATE/containerd.toml"
wait_for containerd 30 ctr -a "$CSOCK" version
for img in "$IMAGES"/*.tar; do
  [[ -e $img ]] || continue
  log "importing $(basename "$img")"
  ctr -a "$CSOCK" -n k8s.io images import "$img" >>"$LOG/import.log" 2>&1
done

# ---------- kube-apiserver ----------
wait_for etcd 30 curl -sf http://127.0.0.1:2379/health
start kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers=http://127.0.0.1:2379 --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=6443 \
  --service-cluster-ip-range=$SVC_CIDR --allow-privileged=true \
  --authorization-mode=Node,RBAC --client-ca-file="$PKI/ca.crt" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=Hostname --endpoint-reconciler-type=none \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --enable-admission-plugins=NodeRestriction --profiling=false
wait_for kube-apiserver 90 curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" https://127.0.0.1:6443/readyz

# ---------- controller-manager, scheduler ----------
start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$KCFG" \
  --authentication-kubeconfig="$KCFG" --authorization-kubeconfig="$KCFG" \
  --bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --use-service-account-credentials=true --controllers='*,-cloud-node-lifecycle' --profiling=false
start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$KCFG" \
  --authentication-kubeconfig="$KCFG" --authorization-kubeconfig="$KCFG" \
  --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --profiling=false
# Dynamic volumes for PersistentVolumeClaims (agentd's persist): kube/allinone/provisioner.go says why not
# kube-controller-manager's --enable-hostpath-provisioner (its volumes are root 0750, and a hostPath
# volume gets no fsGroup: agentd's uid-1000 pods could not write them).
start hostpath-provisioner "$BIN/k8s-allinone" hostpath-provisioner --kubeconfig="$KCFG" --root="$STATE/volumes"

# ---------- kubelet ----------
cat > "$STATE/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$PKI/kubelet-serving.crt"
tlsPrivateKeyFile: "$PKI/kubelet-serving.key"
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CSOCK
imageServiceEndpoint: unix://$CSOCK
failSwapOn: false
failCgroupV1: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podCIDR: $POD_CIDR
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
# the default 110 pods is below BENCHMARKS' 200-pod row; the pod CIDR (a /24) holds 254
maxPods: 250
protectKernelDefaults: false
makeIPTablesUtilChains: false
EOF
start kubelet "$BIN/kubelet" --config="$STATE/kubelet-config.yaml" --kubeconfig="$STATE/kubelet.kubeconfig" \
  --root-dir="$STATE/kubelet" --hostname-override="$NODE_NAME" --v=1
wait_for "node Ready" 120 bash -c "kubectl --kubeconfig '$KCFG' get node '$NODE_NAME' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
wait_for "default serviceaccount" 60 kubectl --kubeconfig "$KCFG" -n default get serviceaccount default
# single node: let anything schedule here
kubectl --kubeconfig "$KCFG" taint node "$NODE_NAME" node-role.kubernetes.io/control-plane- >/dev/null 2>&1 || true
# The default StorageClass: claims are bound by the provisioner started above, once the scheduler has
# placed their pod (WaitForFirstConsumer, as on most real clusters); deleting a claim deletes its volume.
kubectl --kubeconfig "$KCFG" apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-hostpath
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: agentd.local/hostpath
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
EOF
log "cluster up; export KUBECONFIG=$KCFG"
