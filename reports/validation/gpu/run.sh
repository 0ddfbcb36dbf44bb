#!/usr/bin/env bash
# The GPU validation in one call, for a session lent a device (see README.md beside this).
#   1. here:  pip download --dest .device-wheels --only-binary=:all: --python-version 3.12 \
#                 --platform manylinux2014_x86_64 --implementation cp pydantic
#   2. device run tool: command `bash reports/validation/gpu/run.sh`, carry [".device-wheels"],
#      timeout_s 480 (leaves room for one rerun of the 15-minute lease)
#   3. unpack $OUT/<name>-heldout.tgz (or -graphs.tgz) into reports/validation/<device>-heldout/ here and commit; point
#      hardware_profiles/<device>.yaml's kernel_tables: to its kernels/ (paths relative to hardware_profiles/).
# DEVICE=cpu QUICK=1 runs the same plumbing on a CPU (how it was tested before a GPU run);
# PROFILE=path/calibrated.yaml skips the kernel profile with one made before (a rerun).
# GRAPHS=1 times kernels and passes as CUDA graph replays (validate --cuda-graphs), into <name>-graphs;
# TESTS=1 then runs the test suite's GPU tests (pytest -m gpu). LAYERS=N builds N layers (default 4), into <name>-NL.
# MODELS=a,b,c validates those models instead of validate's default three (the profile leaves their widths out);
# NAME=x names the result folder; GRID=serving times a loaded engine's steps (validate --grid); DTYPES=bf16
# and BUDGET=s (seconds of pass timing) override the defaults bf16,fp16 and 90.
# What comes back from the device is at most 8 files, 2 folders down: the run writes under WORK and
# packs each result folder into one .tgz in OUT, beside log.txt (everything printed) and device.txt.
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/roofline-gpu-out}
WORK=${WORK:-/tmp/roofline-gpu-work}
DEVICE=${DEVICE:-cuda}
LIMIT=${LIMIT:-420}  # seconds for validate, so the packing after it runs even when it is cut short
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if ! $PY -c "import pydantic" 2>/dev/null; then
    $PY -m pip install --quiet --no-index --find-links .device-wheels pydantic || { echo "no pydantic: carry .device-wheels"; exit 2; }
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
{
    $PY - <<'PY'
import torch, platform
print("torch", torch.__version__, "cuda", torch.version.cuda, "python", platform.python_version())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(torch.cuda.get_device_name(0), f"{p.total_memory / 1e9:.1f} GB", p.multi_processor_count, "SMs",
          f"L2 {getattr(p, 'L2_cache_size', 0) / 2**20:.0f} MiB")
PY
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv
} | tee "$OUT/device.txt"
LAYERS=${LAYERS:-4}
name=$( [ "$DEVICE" = cuda ] && echo h200 || echo cpu )$( [ -n "${GRAPHS:-}" ] && echo -graphs || echo -heldout )
[ "$LAYERS" != 4 ] && name=$name-${LAYERS}L
name=${NAME:-$name}
dir="$WORK/$name"
# The kernel profile is measured inside validate, which leaves the held-out models' widths out of its
# grid; then whole passes of those models: predicted (catalog profile and kernel profile), then measured.
if [ -n "${QUICK:-}" ]; then
    args=(--model tiny-decoder --quick --budget 6)
else
    args=(--layers "$LAYERS" --dtype "${DTYPES:-bf16,fp16}" --budget "${BUDGET:-90}")
fi
[ -n "${GRID:-}" ] && args+=(--grid "$GRID")
[ -n "${GRAPHS:-}" ] && args+=(--cuda-graphs)
[ -n "${MODELS:-}" ] && args+=(--model "$MODELS")
t0=$SECONDS
timeout --signal=INT --kill-after=20 "$LIMIT" $PY -m calc.cli.app validate --device "$DEVICE" --quiet \
    ${PROFILE:+--profile "$PROFILE"} "${args[@]}" --out "$dir"
status=$?
echo "== validate exit $status after $((SECONDS - t0)) s"
tar -czf "$OUT/$name.tgz" -C "$WORK" "$name" && echo "packed $OUT/$name.tgz"
echo "== summary"
sed -n '/## Held-out error/,/^## Count/p' "$dir/report.md" 2>/dev/null | head -30
if [ -n "${TESTS:-}" ]; then
    echo "== GPU tests"
    timeout 240 $PY -m pytest -q -p no:cacheprovider -m gpu tests/ || status=$?
fi
exit $status
