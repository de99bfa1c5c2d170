#!/usr/bin/env bash
# Mixed precision: step time, peak RSS and activation memory of a GPT of about
# 50 M parameters trained at 2 ranks in fp32, bf16 and fp16 (16-bit activations
# computed in float32, float32 masters, 16-bit gradient communication), next to
# LibTorch's plain bfloat16 (module.to(kBFloat16): bf16 GEMMs) in the same run.
# Not a test: prints one table. Activation memory is measured by counting
# tensor allocations: what the forward leaves alive for backward, and the most
# alive at once during the step, beyond the model, gradients and optimizer state.
#   bash bench/precision.sh [BUILD_DIR]
#   env: LAYERS 10, EMBD 640, BATCH 4, SEQ 256, STEPS 3, RANKS 2, STAGE 0
set -euo pipefail
BUILD_DIR=${1:-build}
LAYERS=${LAYERS:-10}
EMBD=${EMBD:-640}
BATCH=${BATCH:-4}
SEQ=${SEQ:-256}
STEPS=${STEPS:-3}
RANKS=${RANKS:-2}
STAGE=${STAGE:-0}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/precision_bench"
[[ -x "$BENCH" ]] || { echo "precision: $BENCH is missing; build it first" >&2; exit 2; }
export OMP_NUM_THREADS=1
echo "GPT ${LAYERS}x${EMBD}, $RANKS ranks, micro-batch $BATCH x $SEQ tokens per rank, ZeRO stage $STAGE"
echo
echo "| mode | step (ms) | vs fp32 | peak RSS (MB) | activations kept (MB) | vs fp32 | step peak (MB) | vs fp32 | model state (MB) |"
echo "|---|---|---|---|---|---|---|---|---|"
base_ms=""
# bf16/fp32gemm: bf16 with its GEMMs upcast to float32, what CPUs without
# AVX512-BF16 run (TESSERA_BF16_GEMM=fp32).
for row in fp32 bf16 bf16/fp32gemm fp16 torch_bf16; do
  mode=${row%%/*}
  gemm=auto
  [[ $row == */fp32gemm ]] && gemm=fp32
  line=$(TESSERA_BF16_GEMM=$gemm "$TESSERA" run -n "$RANKS" "$BENCH" "$mode" "$STEPS" "$LAYERS" "$EMBD" \
         "$BATCH" "$SEQ" "$STAGE" 2>/dev/null | grep "mode $mode" | sed 's/^\[rank 0\] //')
  f() { awk -v k="$1" '{ for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1) }' <<< "$line"; }
  [[ -n "$base_ms" ]] || { base_ms=$(f median_step_ms); base_saved=$(f saved_mb); base_peak=$(f step_peak_mb); params=$(f params); }
  awk -v m="$row" -v ms="$(f median_step_ms)" -v b="$base_ms" -v rss="$(f peak_rss_mb)" \
      -v sv="$(f saved_mb)" -v bs="$base_saved" -v pk="$(f step_peak_mb)" -v bp="$base_peak" \
      -v st="$(f model_state_mb)" \
      'BEGIN { printf "| %s | %.0f | %.2fx | %s | %.0f | %.2fx | %.0f | %.2fx | %s |\n",
               m, ms, ms / b, rss, sv, sv / bs, pk, pk / bp, st }'
done
echo
awk -v p="$params" -v n="$RANKS" 'BEGIN { printf "parameters: %d; DeepSpeed mixed-precision model state 2P + 2P + 12P/N = %.1f MB at N = %d\n", p, p * (4 + 12 / n) / 1048576, n }'
echo "native bf16 GEMMs (AVX512-BF16) on this CPU: $(grep -q avx512_bf16 /proc/cpuinfo && echo yes || echo no)"
