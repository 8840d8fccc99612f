#!/usr/bin/env bash
# The long version of the malformed-request test (docs/reliability.md §3; the CI version is
# tests/tests/e2e/hostile_requests.rs): starts a `tli host serve` with a token
# and a 1 GiB budget on a fresh state directory, runs the corpus of
# tests/python/hostile_requests.py plus MUTATIONS random mutations of valid
# requests (bytes flipped, inserted, deleted, cut, varints maxed, pieces
# repeated) against it, and reports:
#
#   requests tried, the status code histogram, lost requests (a corpus case with
#   the wrong code, or a mutation answered INTERNAL, UNKNOWN, UNAVAILABLE,
#   DEADLINE_EXCEEDED or DATA_LOSS), whether the host is alive and SERVING,
#   whether the jobs that were there are unchanged and every new job is one an
#   accepted request started, and the host's RSS before and after.
#
# Usage: scripts/hostile-requests.sh [MUTATIONS (5000)] [SEED (1)]
# Environment: SKIP_BUILD=1 to use the binaries already in target/release.
# Exit 0 when nothing was lost, the host is alive and SERVING and the store
# holds only what the accepted requests started.
set -euo pipefail
cd "$(dirname "$0")/.."

MUTATIONS=${1:-5000}
SEED=${2:-1}
PY=.venv/bin/python
[[ -x $PY ]] || { echo "hostile-requests.sh needs .venv with grpcio (make bootstrap)" >&2; exit 1; }
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  cargo build --release -p tli-host -p tli-plugin-template -p tli-fixture-behaviour >&2
fi
TLI=$PWD/target/release/tli
WORK=$(mktemp -d)
HOST_PID=
cleanup() {
  if [[ -n $HOST_PID ]]; then kill "$HOST_PID" 2>/dev/null || true; wait "$HOST_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/plugins"
cp target/release/libtli_plugin_template.so "$WORK/plugins/"
cp target/release/libtli_fixture_behaviour.so "$WORK/plugins/libtli_plugin_behaviour.so"
TOKEN=hostile-$RANDOM$RANDOM
(umask 077; printf '%s' "$TOKEN" > "$WORK/token")

"$TLI" host serve --listen 127.0.0.1:0 --ui-listen off --state-dir "$WORK/state" \
  --plugin-dir "$WORK/plugins" --token-file "$WORK/token" --memory-budget 1GiB \
  2> "$WORK/host.log" &
HOST_PID=$!
for _ in $(seq 600); do
  ADDRESS=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$WORK/host.log" | head -1)
  [[ -n $ADDRESS ]] && break
  kill -0 "$HOST_PID" 2>/dev/null || { cat "$WORK/host.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n ${ADDRESS:-} ]] || { echo "the host printed no address" >&2; cat "$WORK/host.log" >&2; exit 1; }
export TLI_ENDPOINT=http://$ADDRESS TLI_TOKEN=$TOKEN

# One finished job for the cases that need one.
JOB=$("$TLI" train start -p behaviour -a synthetic:100 --steps 20 -o json |
  "$PY" -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')
for _ in $(seq 600); do
  "$TLI" train status "$JOB" -o json | grep -q '"completed"' && break
  sleep 0.1
done
rss() { awk '/^VmRSS/ {print $2}' "/proc/$HOST_PID/status"; }
"$TLI" train list --all -o json > "$WORK/before.json"
RSS_BEFORE=$(rss)
STARTED=$(date +%s)

set +e
"$PY" tests/python/hostile_requests.py "$ADDRESS" --token "$TOKEN" --job "$JOB" \
  --mutations "$MUTATIONS" --seed "$SEED" > "$WORK/summary.json"
CORPUS_RC=$?
set -e
SECONDS_TAKEN=$(( $(date +%s) - STARTED ))
ALIVE=no
kill -0 "$HOST_PID" 2>/dev/null && ALIVE=yes
RSS_AFTER=$( [[ $ALIVE == yes ]] && rss || echo 0)
# Let the accepted jobs finish, so that the listing compares settled jobs.
sleep 2
[[ $ALIVE == yes ]] && "$TLI" train list --all -o json > "$WORK/after.json" || echo '{"jobs":[]}' > "$WORK/after.json"

"$PY" - "$WORK" "$JOB" "$ALIVE" "$RSS_BEFORE" "$RSS_AFTER" "$SECONDS_TAKEN" "$CORPUS_RC" \
  "$MUTATIONS" "$SEED" <<'EOF'
import collections, json, sys
work, job, alive, rss_before, rss_after, seconds, rc, mutations, seed = sys.argv[1:]
s = json.load(open(work + "/summary.json"))
before = {j["job_id"]: j for j in json.load(open(work + "/before.json"))["jobs"]}
after = {j["job_id"]: j for j in json.load(open(work + "/after.json"))["jobs"]}
codes = collections.Counter(c["got"] for c in s["cases"])
codes.update(s["mutations"]["codes"])
lost = len(s["wrong"]) + len(s["mutations"]["host_failures"])
unchanged = all(after.get(i) == j for i, j in before.items())
new = set(after) - set(before)
accounted = new == set(s["started_jobs"])
print(f"command:          scripts/hostile-requests.sh {mutations} {seed}")
print(f"requests tried:   {s['requests_tried']} ({len(s['cases'])} corpus cases + {mutations} mutations, {seconds} s)")
print("status codes:     " + ", ".join(f"{k} {v}" for k, v in codes.most_common()))
print(f"lost:             {lost} (corpus cases with the wrong code: {len(s['wrong'])}; "
      f"mutations answered as a host failure: {len(s['mutations']['host_failures'])})")
print(f"host alive:       {alive}; health: {s['health']}; host crashes: {0 if alive == 'yes' else 1}")
print(f"store:            jobs that were there unchanged: {'yes' if unchanged else 'NO'}; "
      f"{len(new)} new job(s), all started by accepted requests: {'yes' if accounted else 'NO'}")
print(f"host RSS:         {int(rss_before) // 1024} MiB before, {int(rss_after) // 1024} MiB after")
for w in s["wrong"]:
    print(f"  wrong: {w['name']}: expected {w['expected']}, got {w['got']} ({w['message'][:200]})")
for f in s["mutations"]["host_failures"][:20]:
    print(f"  host failure: {f}")
ok = lost == 0 and alive == "yes" and s["health"] == "SERVING" and unchanged and accounted
sys.exit(0 if ok and rc == "0" else 1)
EOF
