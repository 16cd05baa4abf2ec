#!/usr/bin/env bash
# Live check of bernstein-ts-emit against the repository's running (secured) broker and S3:
# a fresh topic prefix made by the admin, the producer principal granted, a fresh producer key
# registered in a manifest, the emit command publishing as User:producer, a scheduler run as
# User:scheduler, and the journal and refusals read back. Prints what each stage got; exit 1
# when an expected verdict is missing. Usage: scripts/live-check.sh (from anywhere; needs
# `infra/up --secure` and `make venv` in the repository, and `npm run build` here).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
set -a; . .infra/env; set +a
admin_config="$BERNSTEIN_KAFKA_CONFIG_FILE"
bern=.venv/bin/bernstein
work="$(mktemp -d /tmp/ts-live.XXXXXX)"
prefix="tslive$(date +%s)$$"
echo "workdir $work prefix $prefix"

$bern topic create --prefix "$prefix" --partitions 3 >/dev/null
$bern kafka acls --prefix "$prefix" --apply >/dev/null
$bern keys init --dir "$work/scheduler-keys" >/dev/null
$bern keys init --producer ts-live --dir "$work/producer-keys" > "$work/keys-init.txt"
{
  cat config/roles.toml
  echo
  sed -n '/^\[\[producers\]\]/,$p' "$work/keys-init.txt" | sed 's/^  //' \
    | sed 's/^roles = \[\].*/roles = ["developer", "scout", "navigator", "analyst", "operator"]/'
} > "$work/roles.toml"

printf 'alpha page bytes' > "$work/page.txt"
cat > "$work/in.jsonl" <<JSON
{"run_id": "run-ts-1", "stage_id": "code-0", "role": "developer", "kind": "coding", "artifact": {"diff": "+x"}, "observations": [{"kind": "file", "ref": "x.py", "file": "$work/page.txt"}, {"kind": "note", "ref": "n", "text": "héllo"}]}
{"run_id": "run-ts-1", "stage_id": "code-1", "role": "developer", "kind": "coding", "artifact_base64": "aGVsbG8=", "artifact_hash": "sha256:0000000000000000000000000000000000000000000000000000000000000000"}
{"close_run": "run-ts-1"}
JSON

BERNSTEIN_KAFKA_CONFIG_FILE="$repo/.infra/clients/producer.properties" BERNSTEIN_TOPIC_PREFIX="$prefix" \
  BERNSTEIN_PRODUCER_KEYS_DIR="$work/producer-keys" node "$here/dist/bin/emit.js" < "$work/in.jsonl" | tee "$work/out.jsonl"
BERNSTEIN_KAFKA_CONFIG_FILE="$repo/.infra/clients/producer.properties" BERNSTEIN_TOPIC_PREFIX="$prefix" \
  BERNSTEIN_PRODUCER_KEYS_DIR="$work/producer-keys" node "$here/scripts/live-sdk.js" run-ts-2
echo '{"close_run": "run-ts-2"}' | BERNSTEIN_KAFKA_CONFIG_FILE="$repo/.infra/clients/producer.properties" \
  BERNSTEIN_TOPIC_PREFIX="$prefix" BERNSTEIN_PRODUCER_KEYS_DIR="$work/producer-keys" node "$here/dist/bin/emit.js"

BERNSTEIN_KAFKA_CONFIG_FILE="$repo/.infra/clients/scheduler.properties" BERNSTEIN_TOPIC_PREFIX="$prefix" \
  BERNSTEIN_KEYS_DIR="$work/scheduler-keys" BERNSTEIN_ROLES="$work/roles.toml" \
  $bern scheduler run --all-partitions --idle-exit 4 --progress-every 600 > "$work/scheduler.log" 2>&1 || { cat "$work/scheduler.log"; exit 1; }

BERNSTEIN_KAFKA_CONFIG_FILE="$admin_config" .venv/bin/python - "$prefix" <<'PY'
import sys
from confluent_kafka import Consumer, TopicPartition
from bernstein.schemas import codec
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.kafka import client_config

prefix = sys.argv[1]
topics = Topics(prefix)
settings = Settings.load()
got = {}
for name in (topics.journal, topics.refusals):
    consumer = Consumer(client_config(settings.kafka_bootstrap, **{"group.id": f"ts-live-{prefix}", "enable.auto.commit": False, "isolation.level": "read_committed"}))
    meta = consumer.list_topics(name, timeout=10).topics[name]
    consumer.assign([TopicPartition(name, p, 0) for p in meta.partitions])
    idle = 0
    while idle < 6:
        msg = consumer.poll(0.5)
        if msg is None:
            idle += 1
            continue
        if msg.error():
            continue
        idle = 0
        value = msg.value()
        if name == topics.journal:
            kind, fields = codec.split_envelope(value)
            entry = codec.decode(fields[0]).record
            stage = entry.get("stage_id") or ("seal" if "head_hash" in entry else entry.get("entry_type") or "?")
            got[stage] = "journal " + str(entry.get("entry_type") or ("final seal" if entry.get("final") else "seal"))
        else:
            refusal = codec.decode(value).record
            got[refusal.get("stage_id") or "close"] = f"refused {refusal.get('code')}"
    consumer.close()
for stage, verdict in sorted(got.items()):
    print(f"{stage}: {verdict}")
expected = {
    "code-0": "journal activity.result",
    "code-1": "refused ARTIFACT_HASH_MISMATCH",
    "seal": "journal final seal",
    "research-0": "journal activity.result",
    "research-1": "journal activity.result",
    "rollup-0": "journal activity.result",
    "deploy-0": "journal activity.result",
    "code-9": "journal activity.result",
}
missing = {k: v for k, v in expected.items() if got.get(k) != v}
if missing:
    print("MISSING", missing)
    sys.exit(1)
print("scheduler verdicts: ok")
PY

$bern keys trust --dir "$work/scheduler-keys" --manifest "$work/roles.toml" --out "$work/trust.json" >/dev/null
for run in run-ts-1 run-ts-2; do
  status=0
  BERNSTEIN_KAFKA_CONFIG_FILE="$repo/.infra/clients/auditor.properties" BERNSTEIN_TOPIC_PREFIX="$prefix" \
    $bern activity verify "$run" --trusted-keys "$work/trust.json" --roles "$work/roles.toml" > "$work/verify-$run.txt" 2>&1 || status=$?
  tail -1 "$work/verify-$run.txt"
  if [ "$status" != 0 ]; then cat "$work/verify-$run.txt"; echo "activity verify $run: exit $status"; exit 1; fi
done

# Refused before anything is produced, typed, exit 3: a prefix the producer was not granted, and a
# granted prefix whose topics the admin has not created.
line='{"run_id":"run-x","stage_id":"s","role":"developer","kind":"coding","artifact":1}'
$bern kafka acls --prefix "${prefix}nt" --apply >/dev/null
for case in "${prefix}ng:not authorized" "${prefix}nt:does not exist; producers never create topics"; do
  status=0
  echo "$line" | BERNSTEIN_KAFKA_CONFIG_FILE="$repo/.infra/clients/producer.properties" BERNSTEIN_TOPIC_PREFIX="${case%%:*}" \
    BERNSTEIN_PRODUCER_KEYS_DIR="$work/producer-keys" node "$here/dist/bin/emit.js" > "$work/refused.out" 2> "$work/refused.err" || status=$?
  if [ "$status" != 3 ] || ! grep -q "${case#*:}" "$work/refused.err" || [ -s "$work/refused.out" ]; then
    echo "prefix ${case%%:*}: expected exit 3 and '${case#*:}', got $status:"; cat "$work/refused.err"; exit 1
  fi
  echo "prefix ${case%%:*}: exit 3, $(cut -c1-90 "$work/refused.err")"
done
echo "live check: ok"
