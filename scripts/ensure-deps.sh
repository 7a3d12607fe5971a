#!/usr/bin/env bash
# Makes sure the servers the tests start privately are installed. The tests never use a running
# server: they start their own on free ports in temporary folders. Installs from Debian packages
# when run as root; otherwise says exactly what to install.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || missing+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || [ -x /usr/bin/redis-benchmark ] || missing+=(redis-tools)
# prometheus and promtool: the tests of deploy/ (alert rules, dashboard queries against a real scrape).
command -v promtool >/dev/null 2>&1 || [ -x /usr/bin/promtool ] || missing+=(prometheus)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
	missing+=(postgresql)
fi

if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "missing test servers: ${missing[*]}" >&2
	echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
	exit 1
fi
echo "installing ${missing[*]} from Debian packages" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
