#!/usr/bin/env bash
# Runs client.py (both bindings, with and without a bearer token) against the
# SDK's own server (benches/a2a_sdk/server.py), so a failure against roostd
# can be told apart from a client problem.
#   PY=/path/to/venv/bin/python tests/a2a-sdk/selfcheck.sh
# PY's environment needs benches/a2a_sdk/requirements.txt (a superset of
# tests/a2a-sdk/requirements.txt).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${PY:-python3}
port=${PORT:-$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
token=selfcheck-token-0123456789
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
"$PY" "$root/benches/a2a_sdk/server.py" --port "$port" --path /a2a/sdk &
pids+=($!)
"$PY" "$root/benches/a2a_sdk/server.py" --port "$((port + 1))" --path /a2a/sdk --token "$token" &
pids+=($!)
for p in "$port" "$((port + 1))"; do
  for _ in $(seq 50); do
    "$PY" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$p/a2a/sdk/.well-known/agent-card.json', timeout=1)" 2>/dev/null && break
    sleep 0.2
  done
done
rc=0
for b in jsonrpc http_json; do
  echo "== $b"
  "$PY" "$here/client.py" --url "http://127.0.0.1:$port/a2a/sdk" --binding "$b" || rc=1
  echo "== $b, bearer token"
  "$PY" "$here/client.py" --url "http://127.0.0.1:$((port + 1))/a2a/sdk" --binding "$b" --token "$token" || rc=1
done
exit $rc
