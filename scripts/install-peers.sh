#!/usr/bin/env bash
# Installs what `woods-bench --features peers` links against: Debian's RocksDB and LevelDB
# libraries and the clang that bindgen needs. Idempotent: does nothing when all are present.
set -euo pipefail

PKGS=(librocksdb-dev libleveldb-dev clang libclang-dev)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
echo "install-peers: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
