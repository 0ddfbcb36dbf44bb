#!/usr/bin/env bash
# The GPU validation in one call, for a session lent a device (see README.md beside this).
#   1. here:  pip download --dest .device-wheels --only-binary=:all: --python-version 3.12 \
#                 --platform manylinux2014_x86_64 --implementation cp pydantic
#   2. device run tool: command `bash reports/validation/gpu/run.sh`, carry [".device-wheels"],
#      timeout_s 420 (leaves room for one rerun of the 15-minute lease)
#   3. copy $OUT/* into reports/validation/<device>/ here and commit.
# DEVICE=cpu QUICK=1 runs the same plumbing on a CPU (how it was tested before a GPU run).
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/roofline-gpu-out}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
if ! $PY -c "import pydantic" 2>/dev/null; then
    $PY -m pip install --quiet --no-index --find-links .device-wheels pydantic || { echo "no pydantic: carry .device-wheels"; exit 2; }
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
R() { $PY -m calc.cli "$@"; }
$PY - <<'PY' | tee "$OUT/device.txt"
import torch, platform
print("torch", torch.__version__, "cuda", torch.version.cuda, "python", platform.python_version())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(torch.cuda.get_device_name(0), f"{p.total_memory / 1e9:.1f} GB", p.multi_processor_count, "SMs")
PY
name=$( [ "$DEVICE" = cuda ] && echo h200 || echo cpu )
status=0
if [ -n "${QUICK:-}" ]; then
    R validate --device "$DEVICE" --model tiny-decoder --quick --out "$OUT/$name-tiny-decoder" || status=$?
else
    # the seed experiment, then a real 8B at full depth, then an MoE at its real widths
    R validate --device "$DEVICE" --model tiny-decoder --dtype fp32,bf16 --budget 30 --out "$OUT/$name-tiny-decoder" || status=$?
    R validate --device "$DEVICE" --model llama-3.1-8b --dtype bf16,fp16 --budget 150 --out "$OUT/$name-llama-3.1-8b" || status=$?
    R validate --device "$DEVICE" --model mixtral-8x7b --layers 4 --dtype bf16 --budget 90 --out "$OUT/$name-mixtral-8x7b-4layers" || status=$?
fi
echo "== summary"; for d in "$OUT"/*/; do echo "-- $d"; sed -n '/held-out/,+8p' "$d/report.md" 2>/dev/null | head -12; done
exit $status
