#!/bin/bash
# How Fixtures/c1174b5-data.tar and c1174b5-keys.json were made (once, by hand):
# a data directory written by `roost serve` of the release before the catalog
# moved into the log (commit c1174b5), for CatalogSystemTests.
#
#   git -C <repo> worktree add /tmp/roost-c1174b5 c1174b5
#   (cd /tmp/roost-c1174b5 && swift build -c release --product roost)
#   mkdir -p /tmp/fixture-build && cd /tmp/fixture-build && <this script>
#   cp -a data pack/data && fallocate --dig-holes pack/data/wal/*.seg   # zeros become holes
#   (cd pack && tar --sparse --owner=0 --group=0 --numeric-owner -cf ../c1174b5-data.tar data)
#
# The 64 MiB segment is stored sparse (the tar is ~20 KiB); `tar -xf` gives
# back the same bytes (zeros read from holes), checked with cmp and
# `roost wal verify`.
set -e
ADMIN=system-test-admin-key-0123456789
BIN=/tmp/roost-c1174b5/.build/release/roost
PORT=18471
ROOST_ADMIN_KEY=$ADMIN $BIN serve --listen 127.0.0.1:$PORT --data /tmp/fixture-build/data --fsync always > out.log 2> err.log &
PID=$!
for i in $(seq 50); do grep -q listening out.log && break; sleep 0.1; done
r() { curl -s -X "$1" "http://127.0.0.1:$PORT$2" -H "Authorization: Bearer $3" ${4:+-H 'Content-Type: application/json' -d "$4"}; echo; }
r POST /v1/apps $ADMIN '{"name":"Legacy","settings":{"max_devices_per_person":3}}'
r POST /v1/apps $ADMIN '{"name":"Gone"}'
r DELETE /v1/apps/2 $ADMIN
SECRET=$(r POST /v1/apps/1/keys $ADMIN '{"kind":"secret","capabilities":["devices:write","devices:read","devices:delete","people:write","setup:write"],"label":"backend","rate_limit_per_second":500}')
echo "$SECRET"
SK=$(echo "$SECRET" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
MOBILE=$(r POST /v1/apps/1/keys $ADMIN '{"kind":"mobile","label":"ios app"}')
echo "$MOBILE"
MK=$(echo "$MOBILE" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
REVOKED=$(r POST /v1/apps/1/keys $ADMIN '{"kind":"secret","capabilities":["devices:read"]}')
RK=$(echo "$REVOKED" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
RID=$(echo "$REVOKED" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
r DELETE /v1/apps/1/keys/$RID $ADMIN
r PUT /v1/credentials/apns/com.example.legacy/production $SK '{"team_id":"TEAM123456","key_id":"KEY1234567"}'
for n in 1 2 3; do
  r POST /v1/devices $SK "{\"platform\":\"ios\",\"token\":\"$(printf 'ab%.0s' $(seq 31))0$n\",\"external_id\":\"user_$n\"}"
done
GUEST=$(r POST /v1/identities/guest $MK '{"ttl_seconds":2592000}')
echo "$GUEST"
TOKEN=$(echo "$GUEST" | python3 -c 'import json,sys; print(json.load(sys.stdin)["identity_token"])')
r PUT /v1/me/devices $TOKEN "{\"installation_id\":\"inst-legacy-1\",\"platform\":\"android\",\"token\":\"fcm-legacy-token-0123456789abcdefghij\"}"
r GET /v1/apps/1 $SK
kill -TERM $PID; wait $PID; echo "exit $?"
python3 - <<PY
import json
json.dump({"admin_key":"$ADMIN","secret_key":"$SK","mobile_key":"$MK","revoked_key":"$RK","identity_token":"$TOKEN"}, open("/tmp/fixture-build/keys.json","w"), indent=1)
PY
