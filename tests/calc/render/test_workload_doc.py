"""The workload format from its schema: the reference page cannot drift, the template plans as it is."""

import json

from typer.testing import CliRunner

from calc.cli.app import app
from calc.render.workload_doc import KEY_HELP, PAGE, TEMPLATE, reference_markdown
from calc.spec.workload import Workload, load_workload

runner = CliRunner()


def test_the_reference_page_is_the_schema():
    # Regenerate with `python -m calc.render.workload_doc` after changing calc/spec/workload.py.
    assert PAGE.read_text() == reference_markdown()


def test_every_top_level_key_is_explained():
    assert set(KEY_HELP) == set(Workload.model_fields)
    page = reference_markdown()
    assert all(f"| `{k}` |" in page for k in Workload.model_fields)
    assert "## Arrival" in page and "`rate_per_s`" in page and "## LogNormal" in page


def test_init_writes_a_template_that_plans_unedited(tmp_path):
    path = tmp_path / "x.yaml"
    r = runner.invoke(app, ["plan", "--init", str(path)])
    assert r.exit_code == 0, r.output
    assert path.read_text() == TEMPLATE.read_text() and path.read_text().startswith("# ")
    again = runner.invoke(app, ["plan", "--init", str(path)])  # never overwrites
    assert again.exit_code == 2 and "exists" in again.stderr
    out = tmp_path / "p"
    r = runner.invoke(app, ["plan", str(path), "--out", str(out), "--requests", "100", "-q"])
    assert r.exit_code == 0, r.output
    assert (out / "report.md").is_file() and json.loads((out / "plan.json").read_text())["chosen"] is not None


def test_price_override_on_the_command_line(tmp_path):
    wl = load_workload(TEMPLATE, requests=100, prices={"h100-sxm": 2.5})
    h100 = next(h for h in wl.hardware if h.name == "h100-sxm")
    assert wl.price_per_gpu_hour(h100) == 2.5
    r = runner.invoke(app, ["plan", str(TEMPLATE), "--price", "h100-sxm", "-q"])
    assert r.exit_code == 2 and "--price: expected NAME=USD" in r.stderr
    r = runner.invoke(app, ["plan", str(TEMPLATE), "--price", "l4=1.0", "-q"])
    assert r.exit_code == 2 and "not in hardware" in r.stderr
