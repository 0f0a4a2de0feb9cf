#!/usr/bin/env bash
# Make a Docker engine reachable on this machine: install docker.io if the daemon is missing,
# start dockerd in the background if none answers, and wait until it does.
# Used by .ci/run and `make docker-engine`; needs root on a machine without a running engine.
set -euo pipefail

if docker info >/dev/null 2>&1; then
  echo "docker engine: already reachable"
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "docker engine: installing docker.io (Debian package)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
fi
echo "docker engine: starting dockerd"
nohup dockerd >/tmp/dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "docker engine: ready"
    exit 0
  fi
  sleep 1
done
echo "docker engine: dockerd did not answer within 60 s; see /tmp/dockerd.log" >&2
tail -20 /tmp/dockerd.log >&2 || true
exit 1
