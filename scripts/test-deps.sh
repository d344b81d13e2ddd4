#!/usr/bin/env bash
# The clients the integration tests drive, installed user-locally under
# target/test-env (nothing system-wide, nothing by hand):
#   target/test-env/venv   python3 with requests, PySocks, prometheus_client
#   target/test-env/node   node_modules with undici
# Prints the environment to use them (`eval "$(scripts/test-deps.sh)"`):
# PATH with the venv first, NODE_PATH, and CI-style strictness
# (PORTCULLIS_TEST_STRICT=1: a test whose client is missing fails, never skips).
# Needs python3 (with venv), node and npm, curl: present on this kind of
# machine; .ci/run installs them with apt-get elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
env_dir="$PWD/target/test-env"
mkdir -p "$env_dir"

venv="$env_dir/venv"
if ! "$venv/bin/python3" -c 'import requests, socks, prometheus_client.parser' 2>/dev/null; then
    python3 -m venv "$venv" >&2
    "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check \
        requests pysocks prometheus_client >&2
fi

node_dir="$env_dir/node"
if ! NODE_PATH="$node_dir/node_modules" node -e \
    "process.exit(require('undici').EnvHttpProxyAgent ? 0 : 3)" 2>/dev/null; then
    mkdir -p "$node_dir"
    npm install --silent --no-audit --no-fund --prefix "$node_dir" undici >&2
fi

printf 'export PATH=%q\n' "$venv/bin:$PATH"
printf 'export NODE_PATH=%q\n' "$node_dir/node_modules"
printf 'export PORTCULLIS_TEST_STRICT=1\n'
