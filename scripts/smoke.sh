#!/usr/bin/env bash
# Post-release smoke probe, curl only:  scripts/smoke.sh BASE_URL
# BASE_URL is the service root, e.g. http://127.0.0.1:8000 . Exits non-zero on the first failure.
set -u
base="${1:?usage: scripts/smoke.sh BASE_URL}"
base="${base%/}"
api="$base/api/v1/event"
fail=0

check() {  # check NAME EXPECTED_STATUS URL
  local name="$1" want="$2" url="$3" got
  got=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$url")
  if [ "$got" = "$want" ]; then
    echo "ok   $name ($got)"
  else
    echo "FAIL $name: expected $want, got $got ($url)"
    fail=1
  fi
}

check "liveness /healthz" 200 "$base/healthz"
check "readiness /readyz" 200 "$base/readyz"
check "admin route without a token" 401 "$api/admin/events"
check "bogus ics capability" 404 "$api/public/ics/not-a-capability"

if [ "$fail" = 0 ]; then echo "smoke: PASS"; else echo "smoke: FAIL"; fi
exit "$fail"
