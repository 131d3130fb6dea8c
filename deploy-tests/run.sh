#!/usr/bin/env bash
# Runs the deploy test suite: a real nginx, the openssl CLI and the FastCGI
# stand-in, all on loopback. Needs nginx, openssl and python3 (with venv).
# Extra arguments go to pytest (e.g. -k tls).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$(mktemp -d "${TMPDIR:-/tmp}/siwa-deploy-venv.XXXXXX")"
trap 'rm -rf "$venv"' EXIT

if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "run.sh: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
    exit 2
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"

cd "$here"
# The suite takes minutes (the two short soaks, three); the bound is there so a hung server
# cannot hang CI. The package's tests under systemd take longer: scripts/test raises the
# bound for them.
timeout "${DEPLOY_TESTS_TIMEOUT:-1200}" "$venv/bin/python" -m pytest -p no:cacheprovider -q "$@"
