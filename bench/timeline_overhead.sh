#!/usr/bin/env bash
# What the timeline costs: `tessera train` (the embedded default GPT, 2 ranks)
# with the timeline off and on (TESSERA_TIMELINE), REPS runs each, alternating so
# that drift of a shared machine hits both alike. Not a test: prints the median
# step time of each run (from metrics.jsonl's tokens/s, the first print window
# left out as warm-up), the median over runs, the on/off ratio, and the size of
# the merged trace.
#   bash bench/timeline_overhead.sh [BUILD_DIR]   (env: STEPS 60, REPS 3, OUT temp dir)
set -euo pipefail
BUILD_DIR=${1:-build}
TESSERA="$BUILD_DIR/src/tessera/tessera"
[[ -x "$TESSERA" ]] || { echo "timeline_overhead: $TESSERA is missing; build it first" >&2; exit 2; }
STEPS=${STEPS:-60}
REPS=${REPS:-3}
OUT=${OUT:-$(mktemp -d)}
# The embedded default config, with STEPS steps and no evaluation, checkpoint or sample.
"$TESSERA" train --print-default-config | python3 -c '
import json, sys
c = json.load(sys.stdin)
c["train"].update({"steps": int(sys.argv[1]), "eval_interval": 0, "checkpoint_interval": 0,
                   "sample_length": 0})
c["scheduler"]["params"]["total_num_steps"] = int(sys.argv[1])
json.dump(c, open(sys.argv[2], "w"))' "$STEPS" "$OUT/config.json"
step_ms() {  # median ms per step of a run, from tokens/s after the first window
  python3 - "$1" "$OUT/config.json" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][1:]
c = json.load(open(sys.argv[2]))
tokens = c["train_micro_batch_size_per_gpu"] * 2 * c["model"]["block_size"]  # per step, 2 ranks
print("%.1f" % (1000.0 * tokens / statistics.median(tps)))
PY
}
echo "tessera train, default GPT, 2 ranks, $STEPS steps, $REPS runs each (alternating)"
echo
echo "| run | timeline off (ms/step) | timeline on (ms/step) |"
echo "|---|---|---|"
off=(); on=()
for rep in $(seq 1 "$REPS"); do
  rm -rf "$OUT/off" "$OUT/on" "$OUT/trace"
  "$TESSERA" run -n 2 "$TESSERA" train --config "$OUT/config.json" --out "$OUT/off" > "$OUT/off.log" 2>&1
  TESSERA_TIMELINE="$OUT/trace" "$TESSERA" run -n 2 "$TESSERA" train --config "$OUT/config.json" \
    --out "$OUT/on" > "$OUT/on.log" 2>&1
  a=$(step_ms "$OUT/off/metrics.jsonl"); b=$(step_ms "$OUT/on/metrics.jsonl")
  off+=("$a"); on+=("$b")
  echo "| $rep | $a | $b |"
done
python3 - "${off[*]}" "${on[*]}" "$OUT/trace/timeline.json" <<'PY'
import json, os, statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
m_off, m_on = statistics.median(off), statistics.median(on)
print("| median | %.1f | %.1f |" % (m_off, m_on))
print()
events = json.load(open(sys.argv[3]))["traceEvents"]
spans = sum(1 for e in events if e.get("ph") == "X")
print("timeline on / off: %.3f (%+.1f%%); merged trace %.1f MB, %d spans" % (
    m_on / m_off, 100 * (m_on / m_off - 1), os.path.getsize(sys.argv[3]) / 1e6, spans))
PY
