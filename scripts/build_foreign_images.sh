#!/usr/bin/env bash
# Build images of other C libraries and distributions than the environments built here, for the tests that run
# the harness's runtime (eval_pipeline/sandbox/tool_runtime.py) inside images it did not build.
#
#   bash scripts/build_foreign_images.sh IMAGE...    # prints nothing; exits non-zero where one cannot be built
#
#   localhost/eval-test-alpine-like:musl    Alpine's shape without Alpine (its CDN cannot be reached here): FROM
#                                           scratch, musl's loader and C library at /lib/ld-musl-x86_64.so.1
#                                           (Debian's `musl`), busybox as /bin/sh and every applet (Debian's
#                                           `busybox-static`, linked statically), root in /etc/passwd. No glibc
#                                           file, no Python, no apt, no git.
#   localhost/eval-test-debian:bullseye     Debian bullseye (minbase): glibc 2.31, older than the 2.36 this
#                                           machine's Python was linked against. No Python.
#
# Idempotent: an image that exists is not rebuilt. Needs podman, apt-get (for Debian's packages) and debootstrap,
# and Debian's mirror.
#
#   DEBIAN_MIRROR          default http://deb.debian.org/debian
set -euo pipefail

DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# The image's root file system, from the packages on this machine's apt sources, into $1.
alpine_like_rootfs() {
  local rootfs=$1 packages
  packages=$(mktemp -d)
  (cd "$packages" && apt-get download -q musl busybox-static >/dev/null 2>&1) || {
    echo "cannot download Debian's musl and busybox-static packages" >&2
    return 1
  }
  mkdir -p "$rootfs/lib" "$rootfs/bin" "$rootfs/sbin" "$rootfs/usr/bin" "$rootfs/usr/sbin" "$rootfs/etc" \
    "$rootfs/tmp" "$rootfs/root" "$rootfs/proc" "$rootfs/sys" "$rootfs/dev"
  chmod 1777 "$rootfs/tmp"
  for deb in "$packages"/*.deb; do
    dpkg-deb -x "$deb" "$packages/tree"
  done
  cp "$packages/tree/lib/x86_64-linux-musl/libc.so" "$rootfs/lib/ld-musl-x86_64.so.1"
  ln -s ld-musl-x86_64.so.1 "$rootfs/lib/libc.musl-x86_64.so.1"
  cp "$packages/tree/bin/busybox" "$rootfs/bin/busybox"
  rm -rf "$packages"
  # Every applet, where Alpine puts it (busybox --list-full names bin/sh, usr/bin/env, ...).
  local applet
  for applet in $("$rootfs/bin/busybox" --list-full); do
    [ -e "$rootfs/$applet" ] || ln -s /bin/busybox "$rootfs/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
  printf 'NAME="Alpine-like (musl, busybox)"\nID=alpine-like\n' >"$rootfs/etc/os-release"
}

bullseye_rootfs() {
  local rootfs=$1
  if ! debootstrap --variant=minbase bullseye "$rootfs" "$DEBIAN_MIRROR" >"$rootfs.log" 2>&1; then
    tail -n 20 "$rootfs.log" >&2
    return 1
  fi
  rm -rf "$rootfs/var/cache/apt/archives"/*.deb "$rootfs/var/lib/apt/lists"/*
}

for image in "$@"; do
  podman image exists "$image" && continue
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  case $image in
    localhost/eval-test-alpine-like:musl) alpine_like_rootfs "$work/rootfs" ;;
    localhost/eval-test-debian:bullseye) bullseye_rootfs "$work/rootfs" ;;
    *)
      echo "no recipe for $image" >&2
      exit 2
      ;;
  esac
  tar -C "$work/rootfs" -c . | podman import -q --change 'CMD ["/bin/sh"]' - "$image" >/dev/null
  rm -rf "$work"
  trap - EXIT
done
