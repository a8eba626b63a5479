#!/usr/bin/env bash
# gelulab's GPU check: on a machine with a GPU, the parity matrix, the kernels' strided verify and the benchmark
# grid on the device, in under 5 minutes, reports written to $OUT (default results/gpu):
#   parity/   gelulab parity (every backend that sees the GPU, impl formula/builtin/kernel, all dtypes and orders
#             eager; compiled float32/bfloat16, orders 0 and 1)
#   verify/   gelulab verify --stride 4097 (the float32 kernels on the device, 1M inputs, every bfloat16/float16)
#   bench/    gelulab bench (builtin, formula, kernel; float32 and bfloat16; n = 1e6 and 1e8; both directions)
#   nvidia-smi.txt, versions.txt, log.txt (each step's time and exit status)
#
# Usage: benchmarks/gpu_check.sh [--install] [--dry-run]
#   --install  first pip-install the framework builds for CUDA (needs a package registry): jax[cuda12] and
#              tensorflow[and-cuda] at the versions pinned in constraints.txt; torch must be a CUDA build already
#              (constraints.txt pins the CPU wheel's version)
#   --dry-run  the same steps on the CPU with a tiny grid (checks the script itself; about a minute)
# Environment: PYTHON (default python3), OUT, GELULAB_THREADS (default 8), GELULAB_BACKEND (default: every
# installed backend that can use the device). Each step has its own time limit; a step that fails or runs out of
# time is logged and the next one runs, so the reports of the others still come back.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/results/gpu}
python=${PYTHON:-python3}
install=0; dry=0
for a in "$@"; do
  case $a in
    --install) install=1 ;;
    --dry-run) dry=1 ;;
    *) echo "gpu_check.sh: unknown option $a (expected --install or --dry-run)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
log=$out/log.txt; : >"$log"
say() { echo "$*" | tee -a "$log"; }

if [ $install = 1 ]; then
  jaxv=$(grep -E '^jax==' "$root/constraints.txt" | cut -d= -f3)
  tfv=$(grep -E '^tensorflow==' "$root/constraints.txt" | cut -d= -f3)
  say "install: jax[cuda12]==$jaxv tensorflow[and-cuda]==$tfv"
  "$python" -m pip install -q "jax[cuda12]==$jaxv" "tensorflow[and-cuda]==$tfv" 2>&1 | tail -3 | tee -a "$log"
fi

# import gelulab from this checkout without installing it: the repository root is the package
pkg=$(mktemp -d); ln -s "$root" "$pkg/gelulab"
export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export GELULAB_THREADS=${GELULAB_THREADS:-8}
if [ $dry = 1 ]; then device=cpu; else device=gpu; fi
export GELULAB_DEVICE=$device

(nvidia-smi || echo "nvidia-smi: not available") >"$out/nvidia-smi.txt" 2>&1
if [ -z "${GELULAB_BACKEND:-}" ]; then
  GELULAB_BACKEND=$("$python" - "$device" <<'PY'
import sys
from gelulab.backends import get_backend, installed_backends
ok = []
for name in installed_backends():
    if name == "numpy" and sys.argv[1] != "cpu":
        continue  # host only
    try:
        get_backend(name, sys.argv[1])
        ok.append(name)
    except Exception as e:  # noqa: BLE001 - reported, the backend is left out
        print(f"{name}: {e}", file=sys.stderr)
print(",".join(ok))
PY
  )
fi
export GELULAB_BACKEND
"$python" -c "import json, gelulab.core.plumbing.report as r; from gelulab.backends import get_backend; import os; \
print(json.dumps(r.environment([get_backend(n) for n in os.environ['GELULAB_BACKEND'].split(',') if n]), indent=1))" \
  >"$out/versions.txt" 2>&1
say "device $device, backends $GELULAB_BACKEND, threads $GELULAB_THREADS, out $out"
if [ -z "$GELULAB_BACKEND" ]; then say "no backend can use the $device"; exit 1; fi

step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.out" 2>&1
  local rc=$?
  say "$name: exit $rc in $((SECONDS - t0)) s (limit $limit s): $*"
}

if [ $dry = 1 ]; then
  P=(--dtype float32 --order 0 --activation relu,gelu_none)
  PC=(--dtype float32 --order 0 --activation gelu_none)
  V=(--stride 1048577 --activation gelu_none)
  B=(--dtype float32 --size 1e4 --activation relu,gelu_none --min-run-s 0.01)
else
  P=()
  PC=(--dtype float32,bfloat16 --order 0,1)
  V=(--stride 4097)
  B=(--dtype float32,bfloat16 --size 1e6,1e8)
fi
step parity_eager 90 "$python" -m gelulab parity --mode eager "${P[@]}" --no-plots --out "$out/parity"
step parity_compiled 70 "$python" -m gelulab parity --mode compiled "${PC[@]}" --no-plots --out "$out/parity_compiled"
step verify 40 "$python" -m gelulab verify "${V[@]}" --out "$out/verify"
step bench 80 "$python" -m gelulab bench --device "$device" "${B[@]}" --no-train-step --no-plots --out "$out/bench"
say "total $SECONDS s"
