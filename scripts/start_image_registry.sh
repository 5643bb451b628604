#!/usr/bin/env bash
# Start two image registries on loopback (Debian's Docker distribution registry) and print their addresses as
# NAME=value lines: a plain one that the engine uses as its mirror of docker.io, as users behind a pull-through
# cache do (an image pushed as 127.0.0.1:15000/swebench/x:v1 is pulled as docker.io/swebench/x:v1), and a
# private one, over TLS with a certificate of its own, that requires a user and password (htpasswd, bcrypt).
# Idempotent: a registry answering on its port is reused.
#
# Podman's service reads registries.conf when it starts (its CLI at each command): run this before
# scripts/start_container_engine.sh. Engines read a registry's CA from certs.d at each pull.
set -euo pipefail

mirror_port=15000
private_port=15001
root=/var/lib/eval-pipeline-registry
user=eval-pipeline
password=eval-pipeline

# Whether a registry answers at the URL with the given status of its API root (200 open, 401 with auth).
answers() { python3 - "$1" "$2" "$root/private/tls.crt" <<'PY'
import ssl, sys, urllib.request, urllib.error
url, expected, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3]
context = ssl.create_default_context(cafile=ca) if url.startswith("https:") else None
try:
    status = urllib.request.urlopen(f"{url}/v2/", timeout=2, context=context).status
except urllib.error.HTTPError as error:
    status = error.code
except Exception:
    sys.exit(1)
sys.exit(0 if status == expected else 1)
PY
}

# serve NAME URL STATUS [HTTP] [TOP]: a registry listening at URL, its data and config under $root/NAME, with
# HTTP's lines added to the config's `http` section and TOP's at its top level.
serve() {
  local name=$1 url=$2 status=$3 http=${4:-} top=${5:-}
  answers "$url" "$status" && return 0
  mkdir -p "$root/$name/data"
  cat >"$root/$name/config.yml" <<CONFIG
version: 0.1
storage:
  filesystem:
    rootdirectory: $root/$name/data
  delete:
    enabled: true
http:
  addr: ${url#*://}
$http
log:
  level: warn
$top
CONFIG
  # Its own directory and no inherited pipes, so a caller capturing this script's output is not held open.
  (cd "$root/$name" && exec nohup docker-registry serve "$root/$name/config.yml" </dev/null >"/tmp/registry-$name.log" 2>&1 &)
  for _ in $(seq 60); do answers "$url" "$status" && return 0; sleep 0.5; done
  echo "the $name registry did not start at $url; see /tmp/registry-$name.log" >&2
  exit 1
}

if ! command -v docker-registry >/dev/null || ! command -v htpasswd >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry apache2-utils >/dev/null
fi
mkdir -p "$root/private"
htpasswd -v -b "$root/htpasswd" "$user" "$password" >/dev/null 2>&1 \
  || htpasswd -c -b -B "$root/htpasswd" "$user" "$password" 2>/dev/null
[ -s "$root/private/tls.crt" ] || openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$root/private/tls.key" -out "$root/private/tls.crt" 2>/dev/null
# The engines trust the private registry's certificate from certs.d: Podman's and Docker Engine's.
for certs in /etc/containers/certs.d /etc/docker/certs.d; do
  mkdir -p "$certs/127.0.0.1:$private_port"
  cp "$root/private/tls.crt" "$certs/127.0.0.1:$private_port/ca.crt"
done

serve mirror "http://127.0.0.1:$mirror_port" 200
serve private "https://127.0.0.1:$private_port" 401 "  tls:
    certificate: $root/private/tls.crt
    key: $root/private/tls.key" "auth:
  htpasswd:
    realm: eval-pipeline-test
    path: $root/htpasswd"

# The engine's mirror of docker.io (Podman's registries.conf; Docker Engine's is `registry-mirrors` in
# daemon.json, docs/DEPLOYMENT.md), written only where it differs.
mkdir -p /etc/containers/registries.conf.d
conf=/etc/containers/registries.conf.d/50-eval-pipeline-mirror.conf
cat >"$conf.new" <<CONF
[[registry]]
prefix = "docker.io"
location = "docker.io"
[[registry.mirror]]
location = "127.0.0.1:$mirror_port"
insecure = true
CONF
if cmp -s "$conf.new" "$conf"; then rm "$conf.new"; else mv "$conf.new" "$conf"; fi

echo "EVAL_PIPELINE_TEST_REGISTRY=127.0.0.1:$mirror_port"
echo "EVAL_PIPELINE_TEST_PRIVATE_REGISTRY=$user:$password@127.0.0.1:$private_port"
