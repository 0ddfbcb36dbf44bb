"""Options that would change nothing are refused, not silently ignored (issue 25: --spec-k/--spec-accept
without a draft, --imbalance on a dense model, --group-size with bf16 weights)."""

import pytest
from typer.testing import CliRunner

from calc.cli.app import app

EST = ["estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm"]


@pytest.mark.parametrize("args, option, problem", [
    (EST + ["--spec-k", "5"], "--spec-k", "needs --spec-draft or --spec-heads"),
    (EST + ["--spec-accept", "0.5"], "--spec-accept", "needs --spec-draft or --spec-heads"),
    (EST + ["--imbalance", "2"], "--imbalance", "applies to MoE models; llama-3.1-8b is dense"),
    (EST + ["--group-size", "32"], "--group-size", "applies to int8/int4/fp4 weights; the weights here are bf16"),
    (["ops", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--group-size", "64"], "--group-size", "bf16"),
    (["sweep", "--model", "llama-3.1-8b", "--imbalance", "1.5"], "--imbalance", "dense"),
    (["sweep", "--weight-dtype", "bf16,fp8", "--group-size", "32"], "--group-size", "bf16, fp8"),
])
def test_an_option_that_changes_nothing_is_one_line(args, option, problem):
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert line.startswith(f"roofline: error: {option}: ") and problem in line and "\n" not in line, line


def test_where_the_options_apply_they_are_taken():
    r = CliRunner().invoke(app, EST + ["--spec-draft", "llama-3.2-1b", "--spec-k", "5", "--format", "json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["estimate", "--model", "mixtral-8x7b", "--hardware", "h100-sxm", "--tp", "2",
                                 "--ep", "2", "--imbalance", "2"])
    assert r.exit_code == 0, r.output
    plain = CliRunner().invoke(app, EST + ["--weight-dtype", "int4", "--format", "json"])
    grouped = CliRunner().invoke(app, EST + ["--weight-dtype", "int4", "--group-size", "32", "--format", "json"])
    assert plain.exit_code == grouped.exit_code == 0
    assert plain.output != grouped.output  # 2/32 vs 2/128 scale bytes per weight
    r = CliRunner().invoke(app, ["sweep", "--weight-dtype", "bf16,int4", "--group-size", "32", "--batch", "1"])
    assert r.exit_code == 0, r.output  # a sweep where one of its dtypes is grouped takes it
