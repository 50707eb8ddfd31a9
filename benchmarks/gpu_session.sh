#!/usr/bin/env bash
# One GPU-machine session: GPU tests, the benchmark, compute-sanitizer; logs under $OUT.
#   OUT=/tmp/out bash benchmarks/gpu_session.sh [tests] [bench] [sanitize] [kernels] [h2h] \
#       [gemv] [decode] [offload] [split] [threshold] [host] [multi] [generate] [quant] [diffusion]
# bench: benchmarks/bench_gpu.py (the examples); sanitize: compute-sanitizer over
# benchmarks/sanitize_examples.py; kernels: benchmarks/bench_kernels.py (single kernels at the
# Llama shapes, old vs new; KERNELS_ARGS=--no-pdl for each kernel's own time); h2h: the head-to-head suite (H2H_ONLY=llama,
# H2H_VARIANTS=torch-graph,og-fused-1s restrict it; H2H_PROFILE=a,b: per-kernel profiles of those variants); gemv: benchmarks/bench_gemv.py (GEMV_ARGS=--sweep
# for every layout); decode: benchmarks/bench_decode_launches.py (DECODE_ARGS); offload: benchmarks/bench_offload.py (OFFLOAD_ARGS, e.g. "--modes balanced");
# split: benchmarks/bench_split.py, then benchmarks/split_diagnose.py (SPLIT_ARGS for both, e.g.
# "--expert-ffn 128"); threshold:
# benchmarks/bench_stream_threshold.py; host: benchmarks/bench_host_cost.py; multi: the several-GPU
# tests (tests/gpu/test_multi_gpu.py: one GPU runs its one-GPU part) and, with 2+ GPUs,
# benchmarks/bench_multi_gpu.py (MULTI_ARGS passes options); generate: tests/gpu/test_gpu_generate.py
# and benchmarks/bench_generate.py (GENERATE_ARGS); quant: benchmarks/bench_quantized.py (f16,
# Q8_0 and Q4_K_M Llama steps; QUANT_ARGS, e.g. "--only llama_launch"); diffusion:
# benchmarks/bench_diffusion.py (diffusers' SD-1.5 UNet resident against PyTorch and streamed under
# a budget; needs diffusers: carry its wheel, DIFFUSION_ARGS). docs/benchmarks.md says what each measures.
# Each part runs under its own time limit so one slow part cannot hide the others' logs.
set -u
OUT=${OUT:-/tmp/optgraph-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
parts=${*:-tests bench sanitize}
{
  nvidia-smi -L
  date -u
  python3 -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)"
  python3 - <<'PY'
from cupy_backends.cuda.libs import cublas
from optgraph.runtime.cuda.blas import load_blas
b = load_blas(cublas)
print("cublas binding:", b.kind, getattr(b, "path", ""))
PY
  which compute-sanitizer
} > "$OUT/env.txt" 2>&1
for part in $parts; do
  case $part in
    tests)
      timeout "${TESTS_S:-240}" python3 -m pytest -q ${TEST_FILES:-tests/gpu/test_gpu_ops.py tests/gpu/test_gpu_examples.py tests/gpu/test_gpu_graph_cache.py tests/gpu/test_gpu_cli.py} -p no:cacheprovider -rfE \
        --durations=8 --timeout=120 > "$OUT/tests.log" 2>&1
      echo "tests rc=$?"; tail -n 25 "$OUT/tests.log" ;;
    bench)
      timeout "${BENCH_S:-120}" python3 benchmarks/bench_gpu.py --iters "${ITERS:-200}" \
        --markdown "$OUT/bench.md" > "$OUT/bench.log" 2>&1
      echo "bench rc=$?"; tail -n 12 "$OUT/bench.log" ;;
    kernels)
      timeout "${KERNELS_S:-150}" python3 benchmarks/bench_kernels.py ${KERNELS_ONLY:+--only "$KERNELS_ONLY"} ${KERNELS_ARGS:-} \
        --markdown "$OUT/kernels.md" \
        > "$OUT/kernels.log" 2>&1
      echo "kernels rc=$?"; tail -n 32 "$OUT/kernels.log" ;;
    h2h)
      timeout "${H2H_S:-600}" python3 benchmarks/bench_gpu.py --suite head-to-head \
        --iters "${ITERS:-100}" --warmup 10 ${H2H_ONLY:+--only "$H2H_ONLY"} \
        ${H2H_VARIANTS:+--variants "$H2H_VARIANTS"} ${H2H_PROFILE:+--profile "$H2H_PROFILE"} --markdown "$OUT/h2h.md" > "$OUT/h2h.log" 2>&1
      echo "h2h rc=$?"; tail -n 45 "$OUT/h2h.log" ;;
    decode)
      timeout "${DECODE_S:-300}" python3 benchmarks/bench_decode_launches.py ${DECODE_ARGS:-} \
        --markdown "$OUT/decode.md" > "$OUT/decode.log" 2>&1
      echo "decode rc=$?"; tail -n 16 "$OUT/decode.log" ;;
    gemv)
      timeout "${GEMV_S:-300}" python3 benchmarks/bench_gemv.py ${GEMV_ARGS:-} \
        --markdown "$OUT/gemv.md" > "$OUT/gemv.log" 2>&1
      echo "gemv rc=$?"; tail -n 20 "$OUT/gemv.log" ;;
    offload)
      timeout "${OFFLOAD_S:-240}" python3 benchmarks/bench_offload.py ${OFFLOAD_ARGS:-} \
        --markdown "$OUT/offload.md" --json "$OUT/offload.json" > "$OUT/offload.log" 2>&1
      echo "offload rc=$?"; tail -n 8 "$OUT/offload.log" ;;
    split)
      timeout "${SPLIT_S:-300}" python3 benchmarks/bench_split.py ${SPLIT_ARGS:-} \
        --markdown "$OUT/split.md" --json "$OUT/split.json" > "$OUT/split.log" 2>&1
      echo "split rc=$?"; tail -n 12 "$OUT/split.log"
      timeout "${SPLIT_DIAGNOSE_S:-150}" python3 benchmarks/split_diagnose.py ${SPLIT_ARGS:-} \
        > "$OUT/split_diagnose.log" 2>&1
      echo "split_diagnose rc=$?"; tail -n 6 "$OUT/split_diagnose.log" ;;
    threshold)
      timeout "${THRESHOLD_S:-240}" python3 benchmarks/bench_stream_threshold.py \
        --budget-s "${THRESHOLD_BUDGET_S:-170}" --json "$OUT/threshold.json" > "$OUT/threshold.log" 2>&1
      echo "threshold rc=$?"; tail -n 20 "$OUT/threshold.log" ;;
    host)
      timeout "${HOST_S:-200}" python3 benchmarks/bench_host_cost.py --markdown "$OUT/host_cost.md" \
        > "$OUT/host_cost.log" 2>&1
      echo "host rc=$?"; tail -n 12 "$OUT/host_cost.log" ;;
    multi)
      timeout "${MULTI_TESTS_S:-300}" python3 -m pytest -q tests/gpu/test_multi_gpu.py -p no:cacheprovider \
        -rfEs --durations=8 > "$OUT/multi_tests.log" 2>&1
      echo "multi tests rc=$?"; tail -n 20 "$OUT/multi_tests.log"
      timeout "${MULTI_S:-480}" python3 benchmarks/bench_multi_gpu.py ${MULTI_ARGS:-} \
        --markdown "$OUT/multi.md" > "$OUT/multi.log" 2>&1
      echo "multi bench rc=$?"; tail -n 12 "$OUT/multi.log" ;;
    generate)
      timeout "${GENERATE_TESTS_S:-600}" python3 -m pytest -q tests/gpu/test_gpu_generate.py -p no:cacheprovider \
        -rfE --durations=8 > "$OUT/generate_tests.log" 2>&1
      echo "generate tests rc=$?"; tail -n 20 "$OUT/generate_tests.log"
      timeout "${GENERATE_S:-600}" python3 benchmarks/bench_generate.py ${GENERATE_ARGS:-} \
        --markdown "$OUT/generate.md" > "$OUT/generate.log" 2>&1
      echo "generate bench rc=$?"; tail -n 12 "$OUT/generate.log" ;;
    quant)
      timeout "${QUANT_S:-450}" python3 benchmarks/bench_quantized.py ${QUANT_ARGS:-} \
        --markdown "$OUT/quant.md" > "$OUT/quant.log" 2>&1
      echo "quant rc=$?"; tail -n 30 "$OUT/quant.log" ;;
    diffusion)
      timeout "${DIFFUSION_S:-600}" python3 benchmarks/bench_diffusion.py ${DIFFUSION_ARGS:-} \
        --markdown "$OUT/diffusion.md" > "$OUT/diffusion.log" 2>&1
      echo "diffusion rc=$?"; tail -n 16 "$OUT/diffusion.log" ;;
    sanitize)
      for tool in memcheck racecheck synccheck; do
        timeout "${SAN_S:-240}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
          python3 benchmarks/sanitize_examples.py ${SAN_ONLY:+--only "$SAN_ONLY"} > "$OUT/$tool.log" 2>&1
        echo "$tool rc=$?"; grep -c "ran eagerly" "$OUT/$tool.log"; tail -n 4 "$OUT/$tool.log"
      done ;;
    *) echo "unknown part: $part (tests bench sanitize kernels h2h gemv decode offload split threshold host multi generate quant diffusion)" ;;
  esac
done
