#!/usr/bin/env bash
# Install the kernel tools the Linux dataplane drives, where missing.
# Needs root for apt-get; without root it only reports what is missing.
set -euo pipefail
need=()
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v ipset >/dev/null 2>&1 || need+=(ipset)
command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
command -v nft >/dev/null 2>&1 || need+=(nftables)
# The real control plane's test bed (testbed/control_plane.py): its
# certificates, and the socket that lets tests reach the API server inside
# its namespace.
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v socat >/dev/null 2>&1 || need+=(socat)
# Unpacking Calico's source archives (testbed/upstream/calico.py).
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-system-deps: missing ${need[*]} (run as root on Debian/Ubuntu to install)" >&2
  exit 0
fi
echo "install-system-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
