#!/usr/bin/env bash
# Build local images that stand in for Terminal-Bench 2 / Harbor tasks' `FROM` images, one per family.
#
#   bash scripts/build_task_base.sh [FROM ...]     # default: every FROM Terminal-Bench 2.0 uses
#
# No image registry can be reached here, so a task's `FROM python:3.13-slim-bookworm` or
# `FROM ubuntu:24.04` cannot be pulled. This script builds, from distribution packages and PyPI
# only, an image that can replace that one line (nothing else of a task is changed), and prints
# `FROM=image` for each FROM asked, space-separated: the value of EVAL_PIPELINE_TASK_BASE_IMAGES.
# A task installs its distribution's packages by name and version, so each family gets its own:
#
#   python:3.X[-slim][-bookworm]  Debian bookworm (minbase) with this machine's pyenv build of
#                                 Python 3.X in /usr/local, as the python images have it (commands,
#                                 and the scripts pip installs, in /usr/local/bin; its shared library
#                                 found through ldconfig; no Debian python3). python:3.X-slim is
#                                 Debian trixie today; its stand-in stays on bookworm, whose
#                                 libraries the pyenv builds are linked against.
#   ubuntu:24.04 / ubuntu:noble   Ubuntu noble (minbase) with the sources ubuntu:24.04 lists (main,
#                                 universe, restricted, multiverse; -updates, -backports, -security).
#   debian:13* / debian:trixie*   Debian trixie; debian:12* / bookworm* and debian:11* / bullseye*
#                                 likewise, each with its -updates and -security suites.
#
# Every family also has:
#   - curl and ca-certificates installed, so a test.sh's `apt-get install -y curl` has nothing to do
#     (and its `apt-get update` may fail offline without harm: TB2's test.sh scripts do not `set -e`);
#   - uv and uvx (uv's PyPI wheel, the version TB2's test.sh asks astral.sh for) in $HOME/.local/bin
#     with the `env` script there that astral's installer writes, so `source $HOME/.local/bin/env`
#     works when `curl https://astral.sh/... | sh` cannot download anything;
#   - Python 3.13 for the verifier's `uvx -p 3.13` (uv would download it from GitHub, which cannot be
#     reached): only `python3.13` in /usr/local/bin, so the image's own `python3` is unchanged. Not on
#     bullseye, whose C library is older than the pyenv build's;
#   - uv's cache warmed with the verifier's own tool environment
#     (`uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest`), so the verifier only
#     revalidates PyPI's index instead of downloading wheels;
#   - apt's package lists complete and current at build time, so a test.sh's `apt-get update` only
#     revalidates them;
#   - the host's CA bundle added to the image's trust store (the registries are reached through a
#     TLS-inspecting proxy), with SSL_CERT_FILE / PIP_CERT / REQUESTS_CA_BUNDLE pointing at it: uv
#     only trusts its built-in roots unless SSL_CERT_FILE is set.
#
# Idempotent: an image that exists is not rebuilt. Needs podman and debootstrap
# (scripts/start_container_engine.sh installs both) and network access to the distributions'
# mirrors and PyPI.
#
#   EVAL_EXTRA_CA_BUNDLE   CA bundle to trust inside the images (default: the host's bundle)
#   DEBIAN_MIRROR          default http://deb.debian.org/debian
#   UBUNTU_MIRROR          default http://archive.ubuntu.com/ubuntu
set -euo pipefail

CA_BUNDLE=${EVAL_EXTRA_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
UBUNTU_MIRROR=${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
PYENV_ROOT=${PYENV_ROOT:-$HOME/.pyenv}
UV_VERSION=0.9.5
PYTEST_VERSION=8.4.1
CTRF_VERSION=0.3.5
# Ubuntu's archive key ships in this package; its digest is pinned since the mirror is plain http.
UBUNTU_KEYRING=ubuntu-keyring_2023.11.28.1_all.deb
UBUNTU_KEYRING_SHA256=36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8
TB2_FROMS=(python:3.13-slim-bookworm ubuntu:24.04 python:3.11-slim python:3.10-slim-bookworm
  python:3.11 debian:bullseye-slim debian:13.0-slim)
TAG_PREFIX=localhost/eval-task-base

# The family of a FROM reference: "<distribution> <suite> <python version in /usr/local or ->".
family() {
  case "$1" in
    python:3.*) local version=${1#python:}; echo "debian bookworm ${version%%-*}" ;;
    ubuntu:24.04* | ubuntu:noble*) echo "ubuntu noble -" ;;
    debian:13* | debian:trixie*) echo "debian trixie -" ;;
    debian:12* | debian:bookworm*) echo "debian bookworm -" ;;
    debian:11* | debian:bullseye*) echo "debian bullseye -" ;;
    *) echo "build_task_base.sh: no stand-in is known for FROM $1" >&2; return 1 ;;
  esac
}

pyenv_build() {
  local found
  found=$(ls -d "$PYENV_ROOT/versions/$1".* 2>/dev/null | sort -V | tail -n 1)
  [ -x "$found/bin/python$1" ] || { echo "build_task_base.sh: no pyenv build of Python $1 under $PYENV_ROOT/versions" >&2; return 1; }
  echo "$found"
}

# The shared libraries a pyenv build's standard library loads, by their names on each suite.
python_libraries() {
  case "$1" in
    bookworm) echo libssl3,libffi8,libsqlite3-0,libbz2-1.0,liblzma5,libreadline8,libncursesw6,zlib1g,libuuid1,libgdbm6,libexpat1 ;;
    trixie | noble) echo libssl3t64,libffi8,libsqlite3-0,libbz2-1.0,liblzma5,libreadline8t64,libncursesw6,zlib1g,libuuid1,libgdbm6t64,libexpat1 ;;
  esac
}

# The apt sources the official image of the suite lists.
write_sources() {
  local distribution=$1 suite=$2 rootfs=$3
  rm -f "$rootfs/etc/apt/sources.list"
  mkdir -p "$rootfs/etc/apt/sources.list.d"
  if [ "$distribution" = ubuntu ]; then
    cat >"$rootfs/etc/apt/sources.list.d/ubuntu.sources" <<EOF
Types: deb
URIs: $UBUNTU_MIRROR
Suites: $suite $suite-updates $suite-backports
Components: main universe restricted multiverse
Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg

Types: deb
URIs: http://security.ubuntu.com/ubuntu
Suites: $suite-security
Components: main universe restricted multiverse
Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg
EOF
  else
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $DEBIAN_MIRROR
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${DEBIAN_MIRROR%/debian}/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  fi
}

# debootstrap a suite into $work/rootfs: the family's packages, curl, and a pyenv build's libraries.
bootstrap() {
  local distribution=$1 suite=$2 work=$3
  local include=curl,ca-certificates,netbase,tzdata
  local libraries mirror=$DEBIAN_MIRROR script=() keyring=()
  libraries=$(python_libraries "$suite")
  if [ -n "$libraries" ]; then include="$include,$libraries"; fi
  if [ "$distribution" = ubuntu ]; then
    mirror=$UBUNTU_MIRROR
    curl -fsS -o "$work/$UBUNTU_KEYRING" "$UBUNTU_MIRROR/pool/main/u/ubuntu-keyring/$UBUNTU_KEYRING"
    echo "$UBUNTU_KEYRING_SHA256  $work/$UBUNTU_KEYRING" | sha256sum -c --quiet
    dpkg-deb -x "$work/$UBUNTU_KEYRING" "$work/keyring"
    keyring=(--keyring="$work/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg")
    include="$include,ubuntu-keyring"
    # debootstrap of Debian bookworm has no script named noble; Ubuntu's suites all use gutsy's.
    script=(/usr/share/debootstrap/scripts/gutsy)
  fi
  if ! debootstrap --variant=minbase "${keyring[@]}" --include="$include" \
      "$suite" "$work/rootfs" "$mirror" "${script[@]}" >"$work/debootstrap.log" 2>&1; then
    tail -n 30 "$work/debootstrap.log" >&2
    return 1
  fi
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb
  write_sources "$distribution" "$suite" "$work/rootfs"
}

# Copy a pyenv build into the rootfs's /usr/local: whole (`full`, a python image's interpreter) or only
# `pythonX.Y` and what it loads (`alongside`, for uv: no python3, pip or pkg-config file of its own).
install_python() {
  local build=$1 how=$2 rootfs=$3 version lib
  version=$(basename "$build"); version=${version%.*}
  lib="lib/python$version"
  local excludes=(--exclude="./$lib/site-packages" --exclude="./$lib/test" --exclude="./$lib/config-*/*.a"
    --exclude="*/__pycache__" --exclude="./bin/idle*" --exclude="./bin/pip*")
  if [ "$how" = alongside ]; then excludes+=(--exclude="./bin/python" --exclude="./bin/python3" --exclude="./bin/*-config"
    --exclude="./bin/pydoc*" --exclude="./bin/*gdb.py" --exclude="./lib/pkgconfig" --exclude="./lib/libpython3.so"
    --exclude="./share"); fi
  tar -C "$build" -c "${excludes[@]}" . | tar -C "$rootfs/usr/local" -x
  mkdir -p "$rootfs/usr/local/$lib/site-packages"
}

work=""
rootfs_tag="$TAG_PREFIX-rootfs:$$"
cleanup() {
  podman rmi -f "$rootfs_tag" >/dev/null 2>&1 || true
  if [ -n "$work" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

build() {
  local tag=$1 distribution=$2 suite=$3 python=$4 verifier_python=""
  work=$(mktemp -d /tmp/task-base.XXXXXX)
  bootstrap "$distribution" "$suite" "$work"
  if [ "$suite" != bullseye ]; then
    install_python "$(pyenv_build 3.13)" alongside "$work/rootfs"
    verifier_python=3.13
  fi
  if [ "$python" != - ]; then install_python "$(pyenv_build "$python")" full "$work/rootfs"; fi
  tar -C "$work/rootfs" -c . | podman import -q - "$rootfs_tag" >/dev/null
  rm -rf "$work/rootfs"

  mkdir -p "$work/ctx"
  cp "$CA_BUNDLE" "$work/ctx/extra-ca-bundle.crt"
  # uv's own wheel, unpacked on this side: the image may have no Python to install it with.
  pip download -q --no-deps --only-binary :all: --platform manylinux_2_17_x86_64 --python-version 3.11 \
    -d "$work/wheel" "uv==$UV_VERSION"
  python3 -m zipfile -e "$work"/wheel/uv-*.whl "$work/wheel/x"
  cp "$work"/wheel/x/uv-*.data/scripts/uv "$work"/wheel/x/uv-*.data/scripts/uvx "$work/ctx/"
  printf '%s\n' '#!/bin/sh' '# add binaries to PATH if they are not added yet' 'case ":${PATH}:" in' \
    '    *:"$HOME/.local/bin":*)' '        ;;' '    *)' '        export PATH="$HOME/.local/bin:$PATH"' \
    '        ;;' 'esac' >"$work/ctx/env"
  local pip="" warm=""
  if [ "$python" != - ]; then pip=" && python3 -m ensurepip >/dev/null && ln -sf pip3 /usr/local/bin/pip"; fi
  if [ -n "$verifier_python" ]; then warm=" && cd / && /root/.local/bin/uvx -q -p $verifier_python -w pytest==$PYTEST_VERSION -w pytest-json-ctrf==$CTRF_VERSION pytest --version"; fi
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
COPY --chmod=755 uv uvx /root/.local/bin/
COPY env /root/.local/bin/env
RUN update-ca-certificates >/dev/null 2>&1 && ldconfig$pip$warm \\
 && apt-get update -qq && apt-get clean
EOF
  podman build --pull=never -q -t "$tag" "$work/ctx" >/dev/null
  cleanup
}

froms=("$@")
[ ${#froms[@]} -eq 0 ] && froms=("${TB2_FROMS[@]}")
for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || { echo "build_task_base.sh: $tool is missing (run scripts/start_container_engine.sh)" >&2; exit 1; }
done
stand_ins=()
for from in "${froms[@]}"; do
  spec=$(family "$from")
  read -r distribution suite python <<<"$spec"
  tag="$TAG_PREFIX:$suite"
  if [ "$python" != - ]; then tag="$tag-py$python"; fi
  podman image exists "$tag" || build "$tag" "$distribution" "$suite" "$python"
  stand_ins+=("$from=$tag")
done
echo "${stand_ins[*]}"
