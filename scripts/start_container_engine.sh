#!/usr/bin/env bash
# Install and start a container engine that speaks the Docker Engine API, for tests and CI.
#
# Where no Docker daemon runs, Podman serves the Docker API on a socket; the
# `docker` SDK talks to it unchanged. Nothing can be pulled from a registry
# here, so the base image is built locally from Debian packages and tagged
# localhost/eval-base:bookworm (users with a registry use python:3.11-slim).
# Prints the DOCKER_HOST to use. Idempotent.
set -euo pipefail

SOCKET=/run/podman/podman.sock
BASE_IMAGE=${EVAL_PIPELINE_BASE_IMAGE:-localhost/eval-base:bookworm}

if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null \
  || ! command -v curl >/dev/null || ! command -v ip >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap curl iproute2 >/dev/null
fi

# crun fails on this kind of host ("cgroups in hybrid mode"); podman's default
# ulimits exceed the host's hard limits; journald, podman's default event log,
# does not run here, and the tests read the engine's events.
mkdir -p /etc/containers
cat > /etc/containers/containers.conf <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
events_logger = "file"
CONF

# The service runs in a directory of its own: conmon needs its working directory to exist for as long as the
# service lives (a deleted checkout breaks every container start), and writes files such as `oom` into it.
if ! curl -sf --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1; then
  mkdir -p "$(dirname "$SOCKET")"
  (cd "$(dirname "$SOCKET")" && exec nohup podman system service --time=0 "unix://$SOCKET") \
    </dev/null >/tmp/podman-service.log 2>&1 &
  for _ in $(seq 1 50); do
    curl -sf --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1 && break
    sleep 0.2
  done
fi

if ! podman image exists "$BASE_IMAGE"; then
  rootfs=$(mktemp -d)
  debootstrap --variant=minbase --include=python3,python3-venv,git,patch,ca-certificates \
    bookworm "$rootfs" http://deb.debian.org/debian >/tmp/debootstrap.log 2>&1
  tar -C "$rootfs" -c . | podman import - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
fi

# netavark before 1.9 (Podman 4.3 here) leaves the default bridge's MAC address to the kernel, which gives a
# bridge the lowest MAC of its ports: a container joining or leaving can change it, every other container's
# cached address for the gateway goes stale, and their connections stall until that ARP entry expires
# (40-60 s here, in a verifier's `pip install`; netavark#833 fixed it upstream). The bridge is made here with
# a fixed address and a port of its own (one end of a veth pair: this kernel has no dummy links), so that
# netavark reuses it and, the bridge never empty, never removes it.
pin_default_bridge() {
  local bridge gateway subnet
  bridge=$(podman network inspect podman --format '{{.NetworkInterface}}') || return 1
  # The first IPv4 subnet's gateway and prefix (a dual-stack network lists an IPv6 one too).
  read -r gateway subnet < <(podman network inspect podman \
    --format '{{range .Subnets}}{{.Gateway}} {{.Subnet}}{{"\n"}}{{end}}' | grep -m1 -E '^[0-9.]+ ') || return 1
  ip link show "$bridge" >/dev/null 2>&1 || ip link add "$bridge" type bridge || return 1
  if [ "$(cat "/sys/class/net/$bridge/addr_assign_type")" != 3 ]; then  # 3: set by hand, never recalculated
    # 0a:58 and the gateway's address in hex, as Kubernetes' bridge plugin derives its bridges' addresses.
    ip link set "$bridge" address "$(printf '0a:58:%02x:%02x:%02x:%02x' ${gateway//./ })" || return 1
  fi
  ip link show eval-pin >/dev/null 2>&1 || ip link add eval-pin type veth peer name eval-pin-peer || return 1
  ip link set eval-pin master "$bridge" up && ip link set eval-pin-peer up || return 1  # a carrier between containers
  [[ "$(ip -4 -o addr show dev "$bridge")" == *" $gateway/"* ]] || ip addr add "$gateway/${subnet#*/}" dev "$bridge" || return 1
  ip link set "$bridge" up
}
if ! pin_default_bridge 2>/tmp/bridge-pin.log; then
  echo "warning: the default bridge's address is not pinned (see /tmp/bridge-pin.log)" >&2
fi

echo "unix://$SOCKET"
