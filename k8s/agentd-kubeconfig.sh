#!/usr/bin/env bash
# Applies role.yaml (namespace agentd, the Role with exactly agentd's verbs, a ServiceAccount bound to it)
# with the admin kubeconfig of up.sh and writes a kubeconfig for that ServiceAccount: the tests talk to
# the cluster with only the rights the README tells operators to grant. Prints the kubeconfig's path.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
STATE="${K8S_LOCAL_STATE:-/var/lib/agentd-k8s}"
export PATH="${K8S_LOCAL_BIN:-$HERE/bin}:$PATH"
ADMIN="$STATE/admin.kubeconfig"
OUT="$STATE/agentd.kubeconfig"
kubectl --kubeconfig "$ADMIN" apply -f "$HERE/role.yaml" >/dev/null
token=$(kubectl --kubeconfig "$ADMIN" -n agentd create token agentd --duration=24h)
cat > "$OUT" <<K
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: "$STATE/pki/ca.crt"}
users:
- name: agentd
  user: {token: "$token"}
contexts:
- name: agentd
  context: {cluster: local, user: agentd, namespace: agentd}
current-context: agentd
K
chmod 600 "$OUT"
echo "$OUT"
