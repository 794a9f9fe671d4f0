#!/usr/bin/env bash
# Builds the CI test cluster's binaries and images (issue 19), from the Go module proxy and Debian only:
#   kube/  wrapper module (own go.mod) -> one multi-call binary k8s-allinone (apiserver, controller-manager,
#          scheduler, kubelet, kubectl) + the pod sandbox "pause"; etcd/ wrapper module -> etcd.
# Output: $K8S_LOCAL_BIN (default k8s/bin, git-ignored) and $K8S_LOCAL_IMAGES (default k8s/images).
# Cached: `go build` reuses the Go build cache (about 4.5 min cold, seconds warm); the pause image is
# rebuilt only when missing. The Debian image for pods is not built here: .ci/run imports agentd's own
# test image (agentd-test:bookworm) with `docker save | ctr import` after up.sh.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="${K8S_LOCAL_BIN:-$HERE/bin}"
IMAGES="${K8S_LOCAL_IMAGES:-$HERE/images}"
K8S_VERSION=v1.34.4 # keep in step with kube/go.mod
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off
mkdir -p "$BIN" "$IMAGES"
t0=$SECONDS

LDF="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$MINOR -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=2025-01-01T00:00:00Z -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$MINOR"
(cd "$HERE/kube" && go build -trimpath -ldflags "$LDF" -o "$BIN/k8s-allinone" ./allinone)
for c in kube-apiserver kubelet kube-controller-manager kube-scheduler kubectl; do ln -sf k8s-allinone "$BIN/$c"; done
(cd "$HERE/etcd" && go build -trimpath -ldflags '-s -w' -o "$BIN/etcd" go.etcd.io/etcd/server/v3)

if [[ ! -f $IMAGES/pause.tar ]]; then
  tmp=$(mktemp -d)
  (cd "$HERE/kube" && go build -trimpath -ldflags '-s -w' -o "$tmp/rootfs/pause" ./pause)
  python3 "$HERE/mkimage.py" docker.io/local/pause:3.10 "$tmp/rootfs" "$IMAGES/pause.tar" --entrypoint /pause
  rm -rf "$tmp"
fi
echo "k8s build: $((SECONDS - t0)) s -> $BIN"
