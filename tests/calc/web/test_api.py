"""The page's JSON API against the CLI: the same records, the same one-line errors as 4xx, safe uploads."""

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pytest
from webcli import cli, cli_json

from calc.web import local

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bench"
SCENARIO = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "batch": "8", "prompt-len": "2048",
            "output-len": "300", "tp": "2"}


def api(base, path, params=None):
    status, headers, body = local.get(f"{base}{path}" + (f"?{urlencode(params)}" if params else ""))
    return status, json.loads(body)


def as_args(params):
    return [x for k, v in params.items() for x in (f"--{k}", v)]


def test_estimate_is_the_cli_record(base):
    status, got = api(base, "/api/estimate", SCENARIO)
    assert status == 200
    assert got == cli_json("estimate", *as_args(SCENARIO))
    # $ per million output tokens: price x GPUs per hour over tokens per hour, by hand
    usd_h = got["usd_per_hour"]
    assert got["usd_per_million_output_tokens"] == pytest.approx(usd_h / 3600 / got["output_tokens_per_s"] * 1e6)


def test_ops_is_the_cli_record(base):
    q = {"model": "mixtral-8x7b", "hardware": "h100-sxm", "tp": "2", "phase": "prefill", "batch": "4", "seq-len": "512"}
    status, got = api(base, "/api/ops", q)
    assert status == 200 and got == cli_json("ops", *as_args(q))


def test_explore_curves_hold_the_estimates(base):
    q = {"model": "llama-3.1-8b,mistral-7b", "hardware": "l4", "batch": "1:200", "prompt-len": "1024"}
    status, got = api(base, "/api/explore", q)
    assert status == 200 and got["scenarios"] == 400 and len(got["curves"]) == 2
    curve = got["curves"][1]
    assert (curve["model"], curve["hardware"], len(curve["tpot_s"])) == ("mistral-7b", "l4", 200)
    for b in (1, 37, 200):
        rec = cli_json("estimate", "--model", "mistral-7b", "--hardware", "l4", "--batch", b, "--prompt-len", 1024)
        i = curve["batch"].index(b)
        assert curve["tpot_s"][i] == pytest.approx(rec["tpot_s"], rel=1e-12)
        assert curve["ttft_s"][i] == pytest.approx(rec["ttft_s"], rel=1e-12)
        assert curve["output_tokens_per_s"][i] == pytest.approx(rec["output_tokens_per_s"], rel=1e-12)


def test_sweep_rows_are_the_cli_rows(base, tmp_path):
    q = {"model": "llama-3.1-8b", "hardware": "h100-sxm,l4", "batch": "1,8", "context": "1024,4096",
         "columns": "tpot_s,decode_bound"}
    status, got = api(base, "/api/sweep", q)
    code, _, err = cli("sweep", *as_args(q), "--out", tmp_path / "g.jsonl")
    assert status == 200 and code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert len(got) == len(rows) == 8
    for a, b in zip(got, rows, strict=True):
        assert a.keys() == b.keys() and a["decode_bound"] == b["decode_bound"]
        assert a["tpot_s"] == pytest.approx(b["tpot_s"], rel=1e-12)


@pytest.mark.parametrize("params", [
    {"batch": "0"}, {"batch": "abc"}, {"tp": "3"}, {"weight-dtype": "fp7"}, {"engine": "nope"},
    {"prompt-len": "200000"}, {"ep": "-1"}, {"hardware": "h100sxm"},
])
def test_errors_are_the_cli_line_as_400(base, params):
    q = {**SCENARIO, **params}
    status, got = api(base, "/api/estimate", q)
    code, _, err = cli("estimate", *as_args(q))
    assert code == 2 and status == 400
    assert got == {"error": err.strip()}
    assert "\n" not in got["error"] and got["error"].startswith("roofline: error: ")


def test_paths_and_unknown_options_are_refused(base, tmp_path):
    model = tmp_path / "m.yaml"
    model.write_text("name: m\n")
    for q, needle in (({"model": str(model)}, "the page takes catalog names"),
                      ({"model": "/etc/passwd"}, "the page takes catalog names"),
                      ({"spec-draft": "../x.yaml"}, "the page takes catalog names"),
                      ({"out": "x.csv"}, "--out: no such option on the page"),
                      ({"modle": "x"}, "did you mean model")):
        status, got = api(base, "/api/estimate", {**SCENARIO, **q})
        assert status == 400 and needle in got["error"], got
    assert api(base, "/api/show", {"ref": "/etc/hostname"})[0] == 400
    assert api(base, "/api/nothing")[0] == 404


def test_scenario_caps_hold(base):
    status, got = api(base, "/api/explore", {"model": "llama-3.1-8b", "hardware": "h100-sxm", "batch": "1:100000"})
    assert status == 400 and "the most one request runs" in got["error"]
    status, got = api(base, "/api/sweep", {"batch": "1:1000", "prompt-len": "1:1000"})
    assert status == 400 and "more than the limit of 2,000 (the most one request runs)" in got["error"]


def test_catalog_lists_everything_with_sources(base):
    from calc.spec.catalog import hardware_catalog, model_catalog

    status, got = api(base, "/api/catalog")
    assert status == 200
    assert [m["name"] for m in got["models"]] == sorted(model_catalog())
    assert [h["name"] for h in got["hardware"]] == sorted(hardware_catalog())
    assert all(m["sources"] for m in got["models"]) and all(h["sources"] for h in got["hardware"])
    assert api(base, "/api/models")[1] == cli_json("models")


def test_compare_upload_is_the_cli_answer(base):
    name = "vllm-serve-concurrency16.json"
    text = (FIXTURES / name).read_text()
    status, _, body = local.post(f"{base}/api/compare", {"files": [{"name": name, "text": text}],
                                                           "options": {"hardware": "h100-sxm"}})
    assert status == 200, body
    got = json.loads(body)
    want = cli_json("compare", FIXTURES / name, "--hardware", "h100-sxm")
    assert got["summary"] == want["summary"]
    assert [r["metrics"] for r in got["runs"]] == [r["metrics"] for r in want["runs"]]
    assert got["runs"][0]["file"] == name  # the uploaded name, not the server's folder


def test_compare_upload_takes_replicas_as_the_cli_does(base):
    name = "vllm-serve-concurrency16.json"
    text = (FIXTURES / name).read_text()
    status, _, body = local.post(f"{base}/api/compare", {"files": [{"name": name, "text": text}],
                                                           "options": {"hardware": "h100-sxm", "gpus": 2}})
    assert status == 200, body
    want = cli_json("compare", FIXTURES / name, "--hardware", "h100-sxm", "--gpus", "2")
    assert [r["metrics"] for r in json.loads(body)["runs"]] == [r["metrics"] for r in want["runs"]]
    one = cli_json("compare", FIXTURES / name, "--hardware", "h100-sxm")
    assert want["runs"][0]["metrics"] != one["runs"][0]["metrics"]  # 8 clients on each of two replicas
    status, _, body = local.post(f"{base}/api/compare", {"files": [{"name": name, "text": text}],
                                                           "options": {"hardware": "h100-sxm", "tp": 100000}})
    assert status == 400 and "--tp: 100000 is out of range" in json.loads(body)["error"]


def test_compare_bad_files_and_caps(base):
    status, _, body = local.post(f"{base}/api/compare", {"files": [{"name": "x.json", "text": "{not json"}],
                                                           "options": {"hardware": "h100-sxm"}})
    got = json.loads(body)
    assert status == 200 and got["errors"] and got["errors"][0]["error"].startswith("roofline: error: x.json")
    assert "/tmp" not in body.decode()
    status, _, body = local.post(f"{base}/api/compare", {"files": [{"name": "big.json", "text": "x" * 9_000_000}]})
    assert status == 413 and "exceeds the page's limit" in json.loads(body)["error"]
    side = "model: /etc/model.yaml\n"
    status, _, body = local.post(f"{base}/api/compare", {"files": [
        {"name": "run.json", "text": (FIXTURES / "vllm-latency.json").read_text()},
        {"name": "run.roofline.yaml", "text": side}], "options": {}})
    assert status == 400 and "the page takes catalog names" in json.loads(body)["error"]


WORKLOAD = {"name": "t", "model": "llama-3.1-8b", "hardware": ["l4"], "arrival": {"rate_per_s": 2},
            "prompt_len": {"dist": "fixed", "value": 256}, "output_len": {"dist": "fixed", "value": 32},
            "slo": {"ttft_p99_s": 2.0, "tpot_p99_s": 0.2}, "max_gpus": 2, "tp": [1], "max_batch": [16],
            "requests": 50}


def _wait(base, job, states=("done", "failed", "cancelled"), timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = api(base, f"/api/plan/{job}")[1]
        if st["state"] in states:
            return st
        time.sleep(0.2)
    raise AssertionError(f"plan {job} still {st['state']} after {timeout} s")


def test_plan_runs_in_the_background_and_writes_the_report(base, tmp_path):
    status, _, body = local.post(f"{base}/api/plan", {"yaml": json.dumps(WORKLOAD)})
    assert status == 202, body
    st = _wait(base, json.loads(body)["job"])
    assert st["state"] == "done", st
    (tmp_path / "w.yaml").write_text(json.dumps(WORKLOAD))
    want = cli_json("plan", tmp_path / "w.yaml", "-q")
    assert st["plan"]["chosen"]["config"] == want["chosen"]["config"]
    assert st["plan"]["ranked"] == want["ranked"]
    status, headers, page = local.get(base + st["report"])
    assert status == 200 and b"Capacity plan: t" in page
    assert b"roofline plan workload.yaml" in page and b"roofline-web-" not in page  # no server folder


def test_plan_cancel_and_limits(base, tmp_path):
    big = {**WORKLOAD, "hardware": ["l4", "a10g", "l40s", "h100-sxm"], "tp": [1, 2, 4], "max_gpus": 8,
           "max_batch": [16, 32, 64, 128], "requests": 2000}
    status, _, body = local.post(f"{base}/api/plan", {"yaml": json.dumps(big)})
    job = json.loads(body)["job"]
    assert status == 202
    status, _, body = local.post(f"{base}/api/plan/{job}/cancel", {})
    assert status == 200
    assert _wait(base, job)["state"] == "cancelled"
    # over the planner's limit: refused with the planner's own message (the CLI's names the file)
    huge = {**WORKLOAD, "requests": 10**6}
    status, _, body = local.post(f"{base}/api/plan", {"yaml": json.dumps(huge)})
    (tmp_path / "workload.yaml").write_text(json.dumps(huge))
    code, _, err = cli("plan", tmp_path / "workload.yaml")
    assert status == 400 and code == 2
    assert json.loads(body)["error"] == err.strip().replace(f"{tmp_path}/", "")
    for bad, needle in (({**WORKLOAD, "model": "/etc/x.yaml"}, "catalog names"),
                        ({**WORKLOAD, "prompt_len": None, "output_len": None, "trace": "/etc/passwd"}, "outside the upload"),
                        ({**WORKLOAD, "tp": "x"}, "workload.yaml: tp")):
        status, _, body = local.post(f"{base}/api/plan", {"yaml": json.dumps(bad)})
        assert status == 400 and needle in json.loads(body)["error"], body


def test_ten_concurrent_clients_get_answers(base):
    queries = [{**SCENARIO, "batch": str(b)} for b in range(1, 11)]
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda q: api(base, "/api/estimate", q), queries))
    assert [s for s, _ in answers] == [200] * 10
    assert [a["batch"] for _, a in answers] == list(range(1, 11))


KEYS = ["model", "hardware", "batch", "prompt-len", "output-len", "tp", "pp", "ep", "weight-dtype", "kv-dtype",
        "engine", "ideal", "imbalance", "group-size", "spec-k", "spec-accept", "spec-heads", "phase", "seq-len",
        "context", "columns", "ref", "bogus", "out"]
VALUES = ["1", "8", "0", "-3", "1e9", "nan", "inf", "1:64", "1:9:0", "2,4", "", "abc", "llama-3.1-8b", "h100-sxm",
          "mixtral-8x7b", "l4", "fp8", "int4", "true", "decode", "prefill", "../../etc/passwd", "<script>x</script>",
          "\u00e9\u00e8", "9" * 40, "1.5", "tpot_s", "vllm"]


def test_random_requests_never_5xx(base):
    rng = np.random.default_rng(23)
    paths = ["/api/estimate", "/api/ops", "/api/explore", "/api/sweep", "/api/show", "/api/catalog", "/api/plan/x"]

    def one(i):
        r = np.random.default_rng([23, i])
        path = paths[r.integers(len(paths))]
        q = {"model": "llama-3.1-8b", "hardware": "h100-sxm"} if r.random() < 0.7 else {}
        for _ in range(r.integers(0, 5)):
            q[KEYS[r.integers(len(KEYS))]] = VALUES[r.integers(len(VALUES))]
        if r.random() < 0.05:
            status, _, body = local.post(f"{base}/api/compare" if r.random() < 0.5 else f"{base}/api/plan",
                                         {"files": [{"name": VALUES[r.integers(len(VALUES))], "text": "{}"}], "yaml": "x: ["})
            return path, q, status, body
        status, _, body = local.get(f"{base}{path}?{urlencode(q)}")
        return path, q, status, body

    n = 2000
    rng.integers(0, 1)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(n)))
    bad = [(p, q, s, b[:200]) for p, q, s, b in results if s >= 500]
    assert bad == []
    statuses = {s for _, _, s, _ in results}
    assert 200 in statuses and 400 in statuses
    assert all(json.loads(b).get("error", "roofline: error: ").startswith("roofline: error: ")
               for _, _, s, b in results if s >= 400)


def test_serve_warns_off_loopback_and_prints_its_address(monkeypatch, capsys):
    import uvicorn

    from calc.web import command

    assert command.is_loopback("127.0.0.1") and command.is_loopback("::1") and command.is_loopback("localhost")
    assert not command.is_loopback("0.0.0.0") and not command.is_loopback("192.168.1.2")
    monkeypatch.setattr(command, "is_loopback", lambda host: False)  # binds 127.0.0.1, says what 0.0.0.0 would
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: [s.close() for s in sockets])
    command.serve_cmd.__wrapped__(port=0, host="127.0.0.1")
    out, err = capsys.readouterr()
    assert "roofline: warning: --host 127.0.0.1 is not a loopback address" in err
    assert out.startswith("roofline: serving on http://127.0.0.1:")


def test_the_cli_starts_without_the_web_stack():
    code = ("import sys; from typer.testing import CliRunner; from calc.cli.app import app; "
            "r = CliRunner().invoke(app, ['estimate', '-m', 'llama-3.1-8b', '--hardware', 'h100-sxm']); "
            "assert r.exit_code == 0; print(' '.join(m for m in ('fastapi', 'starlette', 'uvicorn', 'plotly', "
            "'selenium') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
