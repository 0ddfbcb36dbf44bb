"""Device memory in the bytes the device reports (nvidia-smi memory.total, MiB), converted once in
the spec layer; profiles without a cited report say so and keep the data sheet's GB."""

import pytest
from pydantic import ValidationError

from calc import load_hardware
from calc.spec.catalog import HARDWARE_DIR
from calc.spec.hardware import HardwareSpec

# profile -> MiB reported (the sources are cited in each YAML); bytes = MiB x 1,048,576
REPORTED = {
    "h100-sxm": (81_559, 81_559 * 1_048_576),        # 85,520,809,984 B, not 80e9
    "h200": (143_771, 143_771 * 1_048_576),          # 150,755,721,216 B
    "b200": (183_359, 183_359 * 1_048_576),          # 192,265,846,784 B
    "a100-80gb-sxm": (81_920, 80 * 1_073_741_824),   # exactly 80 GiB
    "a100-40gb": (40_960, 40 * 1_073_741_824),       # exactly 40 GiB
    "a10g": (23_028, 23_028 * 1_048_576),
    "l4": (23_034, 23_034 * 1_048_576),
    "l40s": (46_068, 46_068 * 1_048_576),
    "rtx-3090": (24_576, 24 * 1_073_741_824),
    "rtx-4090": (24_564, 24_564 * 1_048_576),
}


@pytest.mark.parametrize("name", REPORTED)
def test_reported_memory_is_converted_once_to_bytes(name):
    mib, nbytes = REPORTED[name]
    hw = load_hardware(name)
    assert hw.memory_reported_mib == mib
    assert hw.memory_bytes == nbytes


def test_h100_capacity_is_6_9_percent_above_the_data_sheet_gb():
    hw = load_hardware("h100-sxm")
    assert hw.memory_bytes == 85_520_809_984
    assert hw.memory_bytes / (hw.memory_gb * 1e9) == pytest.approx(1.0690, abs=1e-4)


def test_every_other_profile_says_why_it_has_no_reported_memory():
    for path in sorted(HARDWARE_DIR.glob("*.yaml")):
        hw = load_hardware(path.stem)
        if hw.memory_reported_mib is None:
            assert "# memory_reported_mib: none (" in path.read_text(), path.name
            assert hw.memory_bytes == hw.memory_gb * 1e9
        else:
            assert "memory_reported_mib:" in path.read_text() and "# source: smi" in path.read_text(), path.name


def test_a_non_positive_report_is_refused():
    base = dict(name="x", kind="gpu", memory_gb=80, memory_bandwidth_tb_s=3, peak_tflops={"bf16": 900})
    assert HardwareSpec(**base).memory_bytes == 80e9
    with pytest.raises(ValidationError):
        HardwareSpec(**base, memory_reported_mib=0)


def test_a_request_fits_in_what_cuda_gives_a_process():
    """estimate's memory block checks against the total a CUDA process is given (the H100's 81,090
    MiB that vLLM logs as total_memory 79.19 GiB), as the KV budget does; not nvidia-smi's 81,559."""
    from calc import load_model
    from calc.cost.latency import estimate

    est = estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), batch=1, prompt_len=128, output_len=16)
    assert est.memory.capacity_bytes == 81_090 * 1_048_576
    a100 = estimate(load_model("llama-3.1-8b"), load_hardware("a100-80gb-sxm"), batch=1, prompt_len=128, output_len=16)
    assert a100.memory.capacity_bytes == 80 * 1_073_741_824  # no CUDA total cited: the reported memory
