#!/usr/bin/env bash
# scripts/deps.sh — make sure the Debian packages cbt builds with are present.
# As root: installs what is missing (apt-get). Otherwise: prints the one
# apt-get line needed and exits 1. CUDA is not a Debian package here: nvcc is
# looked for at /usr/local/cuda/bin/nvcc and the build goes without it when absent.
set -euo pipefail

PKGS=(build-essential cmake pkg-config python3 python3-venv libcmocka-dev libprotobuf-c-dev
      protobuf-c-compiler libcurl4-openssl-dev zlib1g-dev)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "cbt: missing Debian packages. Install them with:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "cbt: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
