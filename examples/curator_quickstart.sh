#!/usr/bin/env bash
# The curator end to end on synthetic data: register, train, serve, delete over HTTP, read the certificate.
# Usage: bash examples/curator_quickstart.sh   (needs the service extra: pip install -e ".[service]")
set -euo pipefail
PY=${PYTHON:-python}
WORK=$(mktemp -d)
export LETHE_DATA_DIR="$WORK/lethe-data"
PORT=${PORT:-8765}
trap 'kill "$SERVER" 2>/dev/null || true; rm -rf "$WORK"' EXIT

"$PY" - "$WORK/people.csv" <<'PYEOF'
import sys
import numpy as np
import pandas as pd
rng = np.random.default_rng(0)
X = rng.normal(size=(300, 8))
y = (X @ rng.normal(size=8) > 0).astype(int)
df = pd.DataFrame(X, columns=[f"f{j}" for j in range(8)])
df.insert(0, "user_id", [f"user-{i}" for i in range(300)])
df["label"] = y
df.to_csv(sys.argv[1], index=False)
PYEOF

lethe() { "$PY" -m lethe.cli "$@"; }
lethe dataset add people "$WORK/people.csv" --key user_id --label label --normalize rows > /dev/null
lethe train people clf --lam 0.01 --sigma 1 --epsilon 1 --delta 1e-4 | "$PY" -c \
  'import json,sys; b=json.load(sys.stdin); print("trained version", b["version"], "budget left", round(b["budget_left"], 4))'
TOKEN=$(lethe token create webapp --scope requester 2>/dev/null)
ADMIN=$(lethe token create ops --scope admin 2>/dev/null)

"$PY" -m lethe.cli serve --host 127.0.0.1 --port "$PORT" --log-level warning &
SERVER=$!
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null && break; sleep 0.1; done

ID=$(curl -sf -X POST "http://127.0.0.1:$PORT/v1/deletions" -H "Authorization: Bearer $TOKEN" \
       -H 'Content-Type: application/json' -d '{"dataset": "people", "key": "user-42", "request_id": "ticket-1"}' \
     | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "request $ID acknowledged"
for _ in $(seq 100); do
  STATUS=$(curl -sf "http://127.0.0.1:$PORT/v1/deletions/$ID" -H "Authorization: Bearer $TOKEN" \
           | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  [ "$STATUS" != pending ] && break; sleep 0.1
done
echo "status: $STATUS"
# the requester's view: the guarantee and its parameters (nothing about the other records of the batch)
CERT=$(curl -sf "http://127.0.0.1:$PORT/v1/deletions/$ID/certificates" -H "Authorization: Bearer $TOKEN" | "$PY" -c '
import json, sys
(c,) = json.load(sys.stdin)
cert = c["certificate"]
print("model %s: version %s -> %s; %s" % (c["model"], c["old_version"], c["new_version"], cert["guarantee"]),
      file=sys.stderr)
print("epsilon=%s delta=%s budget %.4g" % (cert["epsilon"], cert["delta"], cert["budget"]), file=sys.stderr)
print(c["id"])')
# the operator's view of the same certificate adds the batch's bounds
curl -sf "http://127.0.0.1:$PORT/v1/certificates/$CERT" -H "Authorization: Bearer $ADMIN" | "$PY" -c '
import json, sys
cert = json.load(sys.stdin)["certificate"]
print("operator: residual bound %.4g <= budget %.4g, %d removed" % (cert["residual_bound"], cert["budget"],
                                                                     cert["n_removed"]))'
