#!/usr/bin/env bash
# Makes sure a headless Chromium is installed for the sale page's browser tests (web/). Installs
# Debian's `chromium` when it is missing and this runs as root; otherwise says exactly what to
# install. Prints the browser's path on success.
#
# The tests start the browser themselves with a fresh profile and these flags, which this machine
# needs (without the background-networking ones its connections are refused many at a time):
#   --headless --no-sandbox --disable-gpu --disable-quic --no-first-run
#   --disable-background-networking --disable-component-update --disable-sync --user-data-dir=<tmp>
# SECKILL_CHROMIUM names another browser binary.
set -euo pipefail

find_chromium() {
	local c
	for c in "${SECKILL_CHROMIUM:-}" chromium chromium-browser google-chrome-stable google-chrome; do
		[ -n "$c" ] || continue
		if command -v "$c" >/dev/null 2>&1; then
			command -v "$c"
			return 0
		fi
	done
	return 1
}

if path=$(find_chromium); then
	echo "$path"
	exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "missing a headless browser for the web/ tests" >&2
	echo "install it with: sudo apt-get install -y chromium   (or set SECKILL_CHROMIUM to a Chrome binary)" >&2
	exit 1
fi
echo "installing chromium from Debian packages" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The fonts give the screenshots readable text; chromium alone pulls none on a minimal system.
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
find_chromium
