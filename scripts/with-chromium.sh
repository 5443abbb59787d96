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
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
with_init chromium "$@"
browser=/usr/bin/chromium

if [[ -n "${SIMBA_CHROMIUM:-}" ]]; then
	log "using the browser at $SIMBA_CHROMIUM"
	exec "$@"
fi

# no_browser explains why there is no browser, then fails or runs without.
no_browser() { run_without "$1" "a browser: the browser tests skip"; }

if [[ ! -x "$browser" ]]; then
	if [[ $(id -u) -ne 0 ]]; then
		no_browser "Chromium is not installed and this is not root: install Debian's package (apt-get install chromium) or set SIMBA_CHROMIUM to a browser"
	fi
	if ! command -v apt-get >/dev/null; then
		no_browser "Chromium is not installed and apt-get is missing: install Chromium and set SIMBA_CHROMIUM"
	fi
	log "installing Debian's chromium package"
	apt_install chromium || no_browser "apt-get install chromium failed"
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
