#!/usr/bin/env bash
# The GPU validation in one call, for a session lent a device (see README.md beside this).
#   1. here:  pip download --dest .device-wheels --only-binary=:all: --python-version 3.12 \
#                 --platform manylinux2014_x86_64 --implementation cp pydantic
#   2. device run tool: command `bash reports/validation/gpu/run.sh`, carry [".device-wheels"],
#      timeout_s 420 (leaves room for one rerun of the 15-minute lease)
#   3. copy $OUT/* into reports/validation/<device>/ here and commit; point hardware_profiles/<device>.yaml's
#      kernel_tables: to the tables (paths relative to hardware_profiles/).
# DEVICE=cpu QUICK=1 runs the same plumbing on a CPU (how it was tested before a GPU run);
# PROFILE=path/profile.yaml skips step 1 with a kernel profile made before.
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
R() { $PY -m calc.cli.app "$@"; }
$PY - <<'PY' | tee "$OUT/device.txt"
import torch, platform
print("torch", torch.__version__, "cuda", torch.version.cuda, "python", platform.python_version())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(torch.cuda.get_device_name(0), f"{p.total_memory / 1e9:.1f} GB", p.multi_processor_count, "SMs")
PY
name=$( [ "$DEVICE" = cuda ] && echo h200 || echo cpu )
status=0
# 1. the kernel profile (kernel tables + profile.yaml fitted to them); PROFILE=path reuses one
PROFILE=${PROFILE:-}
if [ -z "$PROFILE" ]; then
    if [ -n "${QUICK:-}" ]; then
        R profile --device "$DEVICE" --quick --out "$OUT/$name-profile" || status=$?
    else
        R profile --device "$DEVICE" --dtype bf16,fp16 --out "$OUT/$name-profile" || status=$?
    fi
    PROFILE="$OUT/$name-profile/profile.yaml"
fi
[ -f "$PROFILE" ] || { echo "no kernel profile at $PROFILE"; exit 1; }
# 2. whole passes of models the profile never saw: predicted (base and kernel profile), then measured
if [ -n "${QUICK:-}" ]; then
    R validate --device "$DEVICE" --profile "$PROFILE" --model tiny-decoder --quick --budget 6 \
        --out "$OUT/$name-heldout" || status=$?
else
    R validate --device "$DEVICE" --profile "$PROFILE" --layers 4 --dtype bf16,fp16 --budget 90 \
        --out "$OUT/$name-heldout" || status=$?
fi
echo "== summary"; for d in "$OUT"/*-heldout/; do echo "-- $d"; sed -n '/## Held-out error/,/^## Count/p' "$d/report.md" 2>/dev/null | head -30; done
exit $status
