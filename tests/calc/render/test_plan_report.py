"""The plan report's tables: every one has a header row that says what its columns are."""

import re

from calc.render.plan import write_report
from calc.serving.planner.plan import plan
from calc.spec.workload import load_workload


def test_no_table_starts_with_an_empty_row(tmp_path):
    result = plan(load_workload("reports/plans/workloads/chat-llama-3.1-8b.yaml", requests=100))
    write_report(result, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Workload\n\n| workload | as planned |\n" in md
    # a markdown table's first line is its header: none may be all blank cells
    heads = [ln for ln, prev in zip(md.splitlines()[1:], md.splitlines()[:-1], strict=True) if ln.startswith("|") and not prev.startswith("|")]
    assert heads and not [h for h in heads if not re.sub(r"[|\s]", "", h)]
    assert "<th></th><th></th>" not in (tmp_path / "report.html").read_text()
