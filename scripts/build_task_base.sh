#!/usr/bin/env bash
# Build the local image that stands in for Terminal-Bench 2 / Harbor tasks' `FROM` images.
#
# No image registry can be reached here, so a task's `FROM python:3.13-slim-bookworm` or
# `FROM ubuntu:24.04` cannot be pulled. This script builds, from Debian packages and PyPI
# only, an image that can replace that one line (nothing else of a task is changed):
#
#   - Debian bookworm (minbase), as python:3.13-slim-bookworm (41 of Terminal-Bench 2's 89 tasks)
#     is, with Python 3.13 in /usr/local as there (commands, and the scripts pip installs, in
#     /usr/local/bin): this machine's pyenv build of 3.13 moved to that prefix (its shared
#     library found through ldconfig) without its installed packages; no Debian python3.
#     Bookworm's gcc 12 (Ubuntu 24.04's is 13) still takes C that gcc 14 refuses (implicit
#     declarations), and the build's headers let a verifier compile an extension;
#   - curl and ca-certificates already installed, so a test.sh's `apt-get install -y curl`
#     has nothing to do (and its `apt-get update` may fail offline without harm: TB2's
#     test.sh scripts do not `set -e`);
#   - uv and uvx (uv's PyPI wheel, the version TB2's test.sh asks astral.sh for) in
#     $HOME/.local/bin with the `env` script there that astral's installer writes, so
#     `source $HOME/.local/bin/env` works when `curl https://astral.sh/... | sh` cannot
#     download anything;
#   - apt's package lists complete and current at build time, so a test.sh's
#     `apt-get update` only revalidates them;
#   - uv's cache warmed with the verifier's own tool environment
#     (`uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest`), so the verifier
#     only revalidates PyPI's index instead of downloading wheels;
#   - the host's CA bundle added to the image's trust store (the registries are reached
#     through a TLS-inspecting proxy), with SSL_CERT_FILE / PIP_CERT / REQUESTS_CA_BUNDLE
#     pointing at it: uv only trusts its built-in roots unless SSL_CERT_FILE is set.
#
# Idempotent: does nothing when the image exists. Prints the image's tag.
# Needs podman and debootstrap (scripts/start_container_engine.sh installs both) and
# network access to Debian's mirror and PyPI.
#
#   EVAL_TASK_BASE_IMAGE   tag to build (default localhost/eval-task-base:trixie)
#   EVAL_EXTRA_CA_BUNDLE   CA bundle to trust inside the image (default: the host's bundle)
#   DEBIAN_MIRROR          default http://deb.debian.org/debian
set -euo pipefail

TAG=${EVAL_TASK_BASE_IMAGE:-localhost/eval-task-base:bookworm-py3.13}
CA_BUNDLE=${EVAL_EXTRA_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
PYENV_ROOT=${PYENV_ROOT:-$HOME/.pyenv}
PYTHON=$(ls -d "$PYENV_ROOT"/versions/3.13.* 2>/dev/null | sort -V | tail -n 1)
UV_VERSION=0.9.5
PYTEST_VERSION=8.4.1
CTRF_VERSION=0.3.5

if podman image exists "$TAG"; then
  echo "$TAG"
  exit 0
fi

for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || { echo "build_task_base.sh: $tool is missing (run scripts/start_container_engine.sh)" >&2; exit 1; }
done
[ -x "$PYTHON/bin/python3.13" ] || { echo "build_task_base.sh: no pyenv build of Python 3.13 under $PYENV_ROOT/versions" >&2; exit 1; }

work=$(mktemp -d /tmp/task-base.XXXXXX)
rootfs_tag="localhost/eval-task-base-rootfs:$$"
cleanup() {
  podman rmi -f "$rootfs_tag" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

log="$work/debootstrap.log"
if ! debootstrap --variant=minbase \
    --include=curl,ca-certificates,netbase,tzdata,libssl3,libffi8,libsqlite3-0,libbz2-1.0,liblzma5,libreadline8,libncursesw6,zlib1g,libuuid1,libgdbm6,libexpat1 \
    "$SUITE" "$work/rootfs" "$MIRROR" >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  exit 1
fi
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb
lib="lib/python3.13"
tar -C "$PYTHON" -c --exclude="./$lib/site-packages" --exclude="./$lib/test" --exclude="./$lib/config-*/*.a" \
    --exclude="./bin/idle*" --exclude="./bin/pip*" --exclude="*/__pycache__" . | tar -C "$work/rootfs/usr/local" -x
mkdir -p "$work/rootfs/usr/local/$lib/site-packages"
tar -C "$work/rootfs" -c . | podman import -q - "$rootfs_tag" >/dev/null
rm -rf "$work/rootfs"

mkdir -p "$work/ctx"
cp "$CA_BUNDLE" "$work/ctx/extra-ca-bundle.crt"
cat >"$work/ctx/Containerfile" <<EOF
FROM $rootfs_tag
ENV LANG=C.UTF-8 \\
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \\
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \\
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \\
    PIP_DISABLE_PIP_VERSION_CHECK=1 \\
    PIP_ROOT_USER_ACTION=ignore
# In /usr/local/share/ca-certificates the extra CAs survive update-ca-certificates
# (which a task's apt-get may trigger).
COPY extra-ca-bundle.crt /usr/local/share/ca-certificates/extra-ca-bundle.crt
RUN update-ca-certificates >/dev/null 2>&1 \\
 && ldconfig && python3 -m ensurepip >/dev/null && ln -sf pip3 /usr/local/bin/pip \\
 && pip install --no-cache-dir --no-deps --target /tmp/uv-wheel uv==$UV_VERSION \\
 && mkdir -p /root/.local/bin \\
 && mv /tmp/uv-wheel/bin/uv /tmp/uv-wheel/bin/uvx /root/.local/bin/ \\
 && rm -rf /tmp/uv-wheel \\
 && printf '%s\n' \\
      '#!/bin/sh' \\
      '# add binaries to PATH if they are not added yet' \\
      'case ":\${PATH}:" in' \\
      '    *:"\$HOME/.local/bin":*)' \\
      '        ;;' \\
      '    *)' \\
      '        export PATH="\$HOME/.local/bin:\$PATH"' \\
      '        ;;' \\
      'esac' >/root/.local/bin/env \\
 && cd / && /root/.local/bin/uvx -q -p 3.13 -w pytest==$PYTEST_VERSION -w pytest-json-ctrf==$CTRF_VERSION pytest --version \\
 && apt-get update -qq && apt-get clean
EOF
podman build --pull=never -q -t "$TAG" "$work/ctx" >/dev/null
echo "$TAG"
