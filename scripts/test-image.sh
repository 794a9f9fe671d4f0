#!/usr/bin/env bash
# scripts/test-image.sh — builds the image the engine tests run machines from (agentd-test:bookworm: Debian
# bookworm with python3 and ca-certificates) for docker, and loads it into podman when podman is here.
#
#   scripts/test-image.sh [--from IMAGE] [--tag TAG] [--force]
#   scripts/test-image.sh --flavor browser [--force]
#
# Offline first: it flattens a Debian-based image this host already has (--from, else the first local
# one of debian:bookworm*, python:3*-slim*, any *bookworm* image) into TAG with `docker export | docker
# import`, so the tests run on a host with no registry and no mirror. Without python3 in it, it installs
# python3 and ca-certificates with apt when a Debian mirror answers. With no local Debian image at all it
# builds one with debootstrap from the mirror (root or sudo). Idempotent: an existing TAG is kept unless
# --force. .ci/run calls it; the README's test command skips the engine tests with one line naming this
# script when the image is missing (set AGENT_TEST_DOCKER=1 to make that a failure instead).
#
# --flavor browser builds agentd-test:browser, the `browser` flavor's image (issue 28): the bookworm
# image above (made first when missing) plus Debian's chromium and fonts-liberation from the Debian
# mirror this host reaches (apt; nothing else is downloaded). agentd runs that chromium inside machines
# of the flavor; no download happens at run time.
set -euo pipefail

tag=agentd-test:bookworm from="" force=0 flavor=""
while [ $# -gt 0 ]; do
  case "$1" in
    --flavor) flavor="$2"; shift 2 ;;
    --from) from="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test-image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
case "$flavor" in
  "") ;;
  browser)
    # The base image first (without --force: an existing one is kept), then chromium on top of it.
    "$0" --tag agentd-test:bookworm ${from:+--from "$from"}
    btag=agentd-test:browser
    if [ "$force" = 1 ] || ! docker image inspect "$btag" >/dev/null 2>&1; then
      echo "== test image: $btag from agentd-test:bookworm + Debian's chromium and fonts-liberation (apt)"
      cid=$(docker create --entrypoint /bin/sh -u 0 agentd-test:bookworm -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation ca-certificates >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/* && chromium --version')
      docker start -a "$cid" || { docker rm "$cid" >/dev/null; echo "test-image.sh: apt could not install chromium into agentd-test:bookworm (no Debian mirror?)" >&2; exit 1; }
      docker export "$cid" | docker import - "$btag" >/dev/null
      docker rm "$cid" >/dev/null
    fi
    if command -v podman >/dev/null && { [ "$force" = 1 ] || ! podman image exists "$btag" 2>/dev/null; }; then
      echo "== test image: loading $btag into podman"
      docker save "$btag" | podman load -q >/dev/null
    fi
    echo "== test image: $btag ready"
    exit 0 ;;
  *) echo "test-image.sh: unknown flavor $flavor (known: browser)" >&2; exit 2 ;;
esac
command -v docker >/dev/null && docker info >/dev/null 2>&1 ||
  { echo "test-image.sh: docker is not answering: start it, or run the tests without engine tests" >&2; exit 1; }

has_python() { docker run --rm --network none --entrypoint /bin/sh "$1" -c 'command -v python3 >/dev/null && [ -f /etc/debian_version ]' >/dev/null 2>&1; }
is_debian() { docker run --rm --network none --entrypoint /bin/sh "$1" -c '[ -f /etc/debian_version ]' >/dev/null 2>&1; }

# flatten IMAGE: one layer, no config, the way debootstrap + docker import makes it.
flatten() {
  local cid
  cid=$(docker create --entrypoint /bin/true "$1")
  docker export "$cid" | docker import - "$tag" >/dev/null
  docker rm "$cid" >/dev/null
}

if [ "$force" = 1 ] || ! docker image inspect "$tag" >/dev/null 2>&1; then
  old=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true) # --force: removed once replaced
  if [ -z "$from" ]; then
    for img in $(docker image ls --format '{{.Repository}}:{{.Tag}}' | grep -v '<none>' |
      grep -E '(^|/)(debian:bookworm|python:3[^ ]*-slim|[^ ]*bookworm)' | grep -vx "$tag"); do
      if has_python "$img"; then from=$img; break; fi
      if [ -z "$from" ] && is_debian "$img"; then from=$img; fi # without python3: apt adds it below
    done
  fi
  if [ -n "$from" ]; then
    echo "== test image: $tag from the local image $from (no registry needed)"
    if has_python "$from"; then
      flatten "$from"
    else
      echo "   $from has no python3: installing python3 and ca-certificates with apt (needs a Debian mirror)"
      cid=$(docker create --entrypoint /bin/sh -u 0 "$from" -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 ca-certificates >/dev/null && apt-get clean')
      docker start -a "$cid" || { docker rm "$cid" >/dev/null; echo "test-image.sh: apt could not install python3 into $from (no mirror?); pass --from an image with python3" >&2; exit 1; }
      docker export "$cid" | docker import - "$tag" >/dev/null
      docker rm "$cid" >/dev/null
    fi
  elif command -v debootstrap >/dev/null; then
    echo "== test image: $tag with debootstrap (no local Debian image; needs a Debian mirror)"
    root="$(mktemp -d /var/tmp/agentd-rootfs.XXXXXX)"
    trap '$SUDO rm -rf "$root"' EXIT
    $SUDO debootstrap --variant=minbase --include=python3,ca-certificates bookworm "$root" >/tmp/debootstrap.log 2>&1 ||
      { tail -20 /tmp/debootstrap.log >&2; exit 1; }
    $SUDO tar -C "$root" -c . | docker import - "$tag" >/dev/null
  else
    echo "test-image.sh: no local Debian-based image and no debootstrap: \`docker load -i\` a debian:bookworm-slim saved elsewhere, then run this again (or --from IMAGE)" >&2
    exit 1
  fi
  [ -z "$old" ] || docker rmi "$old" >/dev/null 2>&1 || true
fi
if command -v podman >/dev/null && { [ "$force" = 1 ] || ! podman image exists "$tag" 2>/dev/null; }; then
  echo "== test image: loading $tag into podman"
  old=$(podman image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
  docker save "$tag" | podman load -q >/dev/null
  [ -z "$old" ] || [ "$old" = "$(podman image inspect -f '{{.Id}}' "$tag")" ] || podman rmi "$old" >/dev/null 2>&1 || true
fi
echo "== test image: $tag ready"
