#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Everything about the CUDA plugin that only a GPU can show, in one run on a GPU machine
# (see docs/benchmarks.md, "GPU"): ops/test_cuda (its test_nccl: the nccl collective backend
# on the machine's GPUs) and ops/test_devices, `floe train` of the
# mlp and cnn on cuda:0 against the CPU's accuracy, their training samples/s at batch 64
# and 512 against PyTorch on the same GPU (same model, batch, optimiser and precision),
# and MatMul 8192^3 through a session against raw cuBLAS in f32, tf32 and bf16.
#
# Usage: bench/gpu_stage.sh here (it packs the build into .gpu), carry .gpu to the GPU
# machine, then there, from the top of the tree:
#   bench/gpu_check.sh [STAGE] [PART...]   PART: tests train matmul bench profile (default all)
# Logs go to $OUT (default /tmp/gpu-check): gpu_check.log (everything), results.jsonl (one
# line per measurement) and summary.txt (printed last). Each step has its own time limit
# (GPU_STEP_TIMEOUT scales them, default 1), so the script ends by itself.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
stage=$(cd "${1:-$top/.gpu}" && pwd) || exit 1
shift || true
parts=${*:-tests train matmul bench profile}
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
log=$out/gpu_check.log
res=$out/results.jsonl
sum=$out/summary.txt
: >"$log"
: >"$res"
: >"$sum"
scale=${GPU_STEP_TIMEOUT:-1}
py=${PYTHON:-python3}

say() { echo "$*" | tee -a "$sum" >>"$log"; }
# step NAME SECONDS CMD...: runs CMD under a time limit, its output into the log.
step() {
  local name=$1 secs=$2 t0 rc
  shift 2
  secs=$(awk -v s="$secs" -v k="$scale" 'BEGIN{printf "%d", s * k}')
  echo "===== $name: $* (limit ${secs}s)" >>"$log"
  t0=$(date +%s%N)
  timeout -k 5 "$secs" "$@" >"$out/.step" 2>&1
  rc=$?
  cat "$out/.step" >>"$log"
  t0=$((($(date +%s%N) - t0) / 1000000))
  say "$(printf '%-34s rc=%-3s %4d.%01ds' "$name" "$rc" $((t0 / 1000)) $((t0 % 1000 / 100)))"
  return $rc
}

# --- the machine, the unpacked build and the libraries it finds -----------------------
f=/tmp/floe-gpu
rm -rf "$f"
mkdir -p "$f"
"$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
  "$stage/floe.tar.xz" /tmp/floe-gpu-x || { say "cannot unpack $stage/floe.tar.xz"; exit 1; }
rm -rf "$f"
mv /tmp/floe-gpu-x/floe "$f"
rm -rf /tmp/floe-gpu-x
data=$stage/data
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
  nvidia-smi
  uname -a
  grep -m1 'model name' /proc/cpuinfo
  nproc
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
} >>"$log" 2>&1
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
say "GPU: $gpu; date $(date -u +%F)"

# cuBLAS, cuDNN, NCCL (the CUDA plugin opens it for its nccl backend) and the CUDA runtime:
# the toolkit's where it has them, else PyTorch's wheels.
libdirs=
for want in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  hit=
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
    [ -e "$d/$want" ] && { hit=$d; break; }
  done
  [ -n "$hit" ] || hit=$(dirname "$(find / -xdev -name "$want" -not -path '/proc/*' 2>/dev/null | head -1)" 2>/dev/null)
  echo "$want: ${hit:-not found}" >>"$log"
  case ":$libdirs:" in *":$hit:"*) ;; *) [ -n "$hit" ] && libdirs=$libdirs:$hit ;; esac
done
export LD_LIBRARY_PATH=$f/lib$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for b in "$f"/bin/* "$f"/plugins/*/.libs/*.so; do
  if ldd "$b" | grep -q 'not found'; then
    say "missing libraries for $b:"
    ldd "$b" | grep 'not found' | tee -a "$sum" >>"$log"
  fi
done
export top_builddir=$f FLOE_NO_INSTALL_DIR=1
export FLOE_PLUGIN_PATH=$f/plugins/cpu/.libs
export FLOE_TRANSPORT_DIR=$f/plugins/transport/local/.libs
export FLOE_TPUSIM_PLUGIN_DIR=$f/plugins/tpu-sim/.libs
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE FLOE_CUDA_MATMUL
floe=$f/bin/floe
gpu_path=$f/plugins/cuda/.libs:$FLOE_PLUGIN_PATH:$FLOE_TRANSPORT_DIR
FLOE_PLUGIN_PATH=$gpu_path step "floe devices" 60 "$floe" devices

# floe_json DEVICE < OUTPUT: the JSON line of `floe train`, tagged, into results.jsonl.
floe_json() {
  grep '^{' | tail -n 1 |
    sed "s/^{/{\"system\":\"floe\",\"device\":\"$1\",\"gpu\":\"$gpu\",/" >>"$res"
}
# train MODEL BATCH DEVICE [LIMIT]: one epoch of `floe train` on the GPU.
train() {
  FLOE_PLUGIN_PATH=$gpu_path step "floe train $1 b$2 $3" "${4:-90}" \
    "$floe" train --model "$1" --epochs 1 --batch "$2" --data "$data" --json --devices "$3"
  local rc=$?
  floe_json "$3" <"$out/.step"
  return $rc
}
# The accuracy reference: the same training on the CPU alone, in the background (8 of the
# cores) while the tests run; joined before anything is timed.
cpu_ref_start() {
  (for m in mlp cnn; do
    timeout -k 5 300 "$floe" train --model "$m" --epochs 1 --batch 64 --data "$data" --json \
      --threads 8 >"$out/.cpu_$m" 2>&1
    echo "exit $?" >>"$out/.cpu_$m"
  done) &
  cpu_ref=$!
}
cpu_ref_join() {
  [ -n "${cpu_ref:-}" ] || return 0
  wait "$cpu_ref"
  cpu_ref=
  for m in mlp cnn; do
    echo "===== floe train $m b64 cpu (background, 8 threads)" >>"$log"
    cat "$out/.cpu_$m" >>"$log"
    say "floe train $m b64 cpu: $(tail -n 1 "$out/.cpu_$m")"
    floe_json cpu <"$out/.cpu_$m"
    rm -f "$out/.cpu_$m"
  done
}
case " $parts " in *" train "*) cpu_ref_start ;; esac
# torch MODEL BATCH STEPS: PyTorch on the same GPU.
torch_run() {
  step "pytorch $1 b$2 cuda" "${4:-120}" "$py" "$top/bench/train_baselines.py" --system torch \
    --device cuda --model "$1" --batch "$2" --steps "$3" --warmup 30 --threads 1 --data "$data"
  tail -n 1 "$out/.step" | grep '^{' >>"$res"
}

for part in $parts; do
  case $part in
  tests)
    # Each test runs in a forked child that sets up CUDA afresh.
    CK_VERBOSITY=verbose NCCL_DEBUG=WARN step "ops/test_cuda" 150 "$f/bin/test_cuda"
    CK_VERBOSITY=verbose step "ops/test_devices" 150 "$f/bin/test_devices"
    ;;
  train)
    cpu_ref_join
    train mlp 64 cuda:0
    train cnn 64 cuda:0
    ;;
  bench)
    # Samples/s at batch 64 (from the accuracy runs above when they ran) and 512, against
    # PyTorch: one epoch of Floe, about as many steps of PyTorch after 30 warm-up steps.
    case " $parts " in *" train "*) ;; *)
      train mlp 64 cuda:0
      train cnn 64 cuda:0
      ;;
    esac
    train mlp 512 cuda:0
    train cnn 512 cuda:0
    torch_run mlp 64 900
    torch_run cnn 64 900
    torch_run mlp 512 110
    torch_run cnn 512 110
    ;;
  matmul)
    # f32 tensors in f32 and tf32; bf16 tensors; f32 tensors in bf16 mode (mixed precision:
    # the session converts the operands each step, raw cuBLAS gets bf16 copies).
    for mm in f32:f32 tf32:f32 f32:bf16 bf16:f32; do
      FLOE_PLUGIN_PATH=$gpu_path FLOE_CUDA_MATMUL=${mm%%:*} \
        step "bench_cuda_matmul ${mm%%:*} ${mm##*:}" 120 \
        "$f/bin/bench_cuda_matmul" --json --dtype "${mm##*:}"
      tail -n 1 "$out/.step" | grep '^{' >>"$res"
    done
    ;;
  profile)
    # Where the training steps' time goes, per op and device (not a timing run).
    for m in mlp cnn; do
      FLOE_PLUGIN_PATH=$gpu_path step "floe train $m b64 cuda:0 --profile" 90 \
        "$floe" train --model "$m" --epochs 1 --data "$data" --devices cuda:0 --profile
    done
    ;;
  esac
done
cpu_ref_join
rm -f "$out/.step"

# The summary: accuracy and samples/s side by side.
"$py" - "$res" <<'PY' | tee -a "$sum" >>"$log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
acc = {(r["model"], r["device"]): r["test_accuracy"] for r in rows
       if r.get("system") == "floe" and r.get("batch") == 64 and "test_accuracy" in r}
for m in ("mlp", "cnn"):
    c, g = acc.get((m, "cpu")), acc.get((m, "cuda:0"))
    if c is not None and g is not None:
        print("%s accuracy: cpu %.4f, cuda:0 %.4f, |diff| %.4f (needs <= 0.01)" % (m, c, g, abs(c - g)))
sps = {}
for r in rows:
    if r.get("device", "").startswith("cuda") and "samples_per_sec" in r:
        sps[(r["model"], r["batch"], r["system"])] = r["samples_per_sec"]
for m in ("mlp", "cnn"):
    for b in (64, 512):
        f, t = sps.get((m, b, "floe")), sps.get((m, b, "pytorch"))
        if f and t:
            print("%s b%d samples/s: floe %.0f, pytorch %.0f, floe/pytorch %.2fx (needs >= 1.0)" % (m, b, f, t, f / t))
for r in rows:
    if "cublas_ms" in r:
        print("matmul %s tensors, mode %s, %d^3: session %.3f ms, cuBLAS %.3f ms, raw/session %.3f"
              % (r.get("dtype", "f32"), r["mode"], r["size"], r["session_ms"], r["cublas_ms"],
                 r["cublas_ms"] / r["session_ms"]))
PY
cat "$sum"
