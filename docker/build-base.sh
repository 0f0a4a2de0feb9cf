#!/usr/bin/env bash
# Build a Debian bookworm base image with python3 *offline* (no registry pull): debootstrap a
# minimal root filesystem from the configured Debian mirror and import it as an image.
# Usage: docker/build-base.sh [TAG [SUITE]]   (default spider-scoring-base:bookworm bookworm)
# bullseye gives Python 3.9, the oldest the bundle supports (a test runs the bundle there).
# Skips the work when the tag already exists. Needs root and the debootstrap package.
set -euo pipefail
tag="${1:-spider-scoring-base:bookworm}"
suite="${2:-bookworm}"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "base image $tag: present"
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq debootstrap >/dev/null
fi
mirror="${DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  # The first Debian archive the machine's apt uses (deb822 "URIs:" or one-line "deb"), not comments.
  mirror=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
           | grep -oE 'https?://[^ ]+/debian/?' | grep -v security | head -n1 || true)
fi
mirror="${mirror:-http://deb.debian.org/debian}"
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
echo "base image $tag: debootstrap $suite from $mirror"
debootstrap --variant=minbase --include=python3 "$suite" "$rootfs" "$mirror" >/tmp/debootstrap.log 2>&1 \
  || { tail -20 /tmp/debootstrap.log >&2; exit 1; }
tar -C "$rootfs" -c . | docker import -c 'ENV LANG=C.UTF-8' - "$tag" >/dev/null
echo "base image $tag: built"
