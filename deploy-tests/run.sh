#!/usr/bin/env bash
# Runs the deploy test suite: a real nginx, the openssl CLI and the FastCGI
# stand-in, all on loopback. Needs nginx, openssl and python3 (with venv).
# Extra arguments go to pytest (e.g. -k tls).
#
#   deploy-tests/run.sh [PYTEST ARGS...]   # a new virtualenv, removed at exit
#   DEPLOY_TESTS_VENV=DIR deploy-tests/run.sh ...
#       # the virtualenv in DIR, made there when missing and installed again only when
#       # requirements.txt changed: scripts/test runs the suite four times with one
#       # (each new one installs kubectl and the Kubernetes schemas again)
#   DEPLOY_TESTS_VENV=DIR deploy-tests/run.sh --venv-only   # make DIR's virtualenv, run nothing
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -n "${DEPLOY_TESTS_VENV:-}" ]; then
    venv=$DEPLOY_TESTS_VENV
else
    venv="$(mktemp -d "${TMPDIR:-/tmp}/siwa-deploy-venv.XXXXXX")"
    trap 'rm -rf "$venv"' EXIT
fi

# The requirements it was installed from, copied in once the install succeeded: a venv
# without it (a failed or interrupted install) or with other ones is made again.
installed="$venv/siwa-requirements.txt"
if ! cmp -s "$here/requirements.txt" "$installed" 2>/dev/null; then
    # --clear empties the directory: only ever one that is a virtualenv already, or empty.
    if [ -n "$(ls -A "$venv" 2>/dev/null)" ] && [ ! -e "$venv/pyvenv.cfg" ]; then
        echo "run.sh: DEPLOY_TESTS_VENV=$venv is neither empty nor a virtualenv: not touching it" >&2
        exit 2
    fi
    if ! python3 -m venv --clear "$venv" >/dev/null 2>&1; then
        echo "run.sh: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
        exit 2
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$installed"
fi
if [ "${1:-}" = --venv-only ]; then
    exit 0
fi

cd "$here"
# The suite takes minutes (the two short soaks, three); the bound is there so a hung server
# cannot hang CI. The package's tests under systemd take longer: scripts/test raises the
# bound for them.
timeout "${DEPLOY_TESTS_TIMEOUT:-1200}" "$venv/bin/python" -m pytest -p no:cacheprovider -q "$@"
