#!/usr/bin/env bash
# Runs the command given (e.g. `make vet unit`) with a Chromium browser for
# the console's end-to-end tests, and exports its path as
# SIMBA_CHROMIUM=/usr/bin/chromium.
#
# - If SIMBA_CHROMIUM is already set, the command runs with that browser.
# - Otherwise Debian's chromium package is installed when missing (as root,
#   with apt-get), and its browser is used. The tests start it themselves,
#   headless, with a fresh profile each time; this script starts nothing.
# - When no browser can be had, it says why; with SIMBA_REQUIRE_SERVERS=1 it
#   fails, otherwise it runs the command without one (the browser tests
#   skip).
set -euo pipefail

if [[ $# -eq 0 ]]; then
	echo "usage: $0 command [args...]" >&2
	exit 2
fi

cmd=("$@")
log() { echo "with-chromium: $*" >&2; }
browser=/usr/bin/chromium

if [[ -n "${SIMBA_CHROMIUM:-}" ]]; then
	log "using the browser at $SIMBA_CHROMIUM"
	exec "$@"
fi

# no_browser explains why there is no browser, then fails or runs without.
no_browser() {
	log "$1"
	if [[ "${SIMBA_REQUIRE_SERVERS:-}" == "1" ]]; then
		log "SIMBA_REQUIRE_SERVERS=1: failing"
		exit 1
	fi
	log "running without a browser: the browser tests skip"
	exec "${cmd[@]}"
}

if [[ ! -x "$browser" ]]; then
	if [[ $(id -u) -ne 0 ]]; then
		no_browser "Chromium is not installed and this is not root: install Debian's package (apt-get install chromium) or set SIMBA_CHROMIUM to a browser"
	fi
	if ! command -v apt-get >/dev/null; then
		no_browser "Chromium is not installed and apt-get is missing: install Chromium and set SIMBA_CHROMIUM"
	fi
	log "installing Debian's chromium package"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends chromium >&2; then
		log "apt-get install failed; updating the package lists and trying again"
		apt-get update -q >&2 || true
		apt-get install -y -q --no-install-recommends chromium >&2 ||
			no_browser "apt-get install chromium failed"
	fi
	if [[ ! -x "$browser" ]]; then
		no_browser "the chromium package is installed but $browser is missing"
	fi
fi

if ! version=$("$browser" --version 2>/dev/null); then
	no_browser "$browser does not run"
fi
export SIMBA_CHROMIUM="$browser"
log "browser: $version at $SIMBA_CHROMIUM"
exec "${cmd[@]}"
