"""suggest(): the one place an unknown name gets its closest catalog names."""

from calc.core.errors import suggest

HARDWARE = ["a100-80gb-sxm", "b200", "h100-pcie", "h100-sxm", "h200", "l4", "l40s"]


def test_a_prefix_comes_before_a_lookalike():
    # "H100" starts h100-sxm and h100-pcie; h200 is only one letter away from "h100".
    assert suggest("H100", HARDWARE) == "; did you mean h100-sxm, h100-pcie, h200?"


def test_case_is_ignored():
    assert suggest("L40S", HARDWARE).startswith("; did you mean l40s")


def test_a_typo_still_gets_difflib():
    assert suggest("h100sxm", HARDWARE).startswith("; did you mean h100-sxm")


def test_nothing_close_is_empty():
    assert suggest("tpu-v9", ["llama-3.1-8b"]) == ""
