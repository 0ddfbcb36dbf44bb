"""Every page in headless Chromium (the system's): numbers shown against `roofline estimate --format json`,
inputs changed, a plan run and its report opened, a benchmark uploaded, errors shown, screenshots not blank.

Screenshots: ROOFLINE_WEB_SCREENSHOTS=reports/web python -m pytest tests/calc/web/test_pages.py
"""

import time
from pathlib import Path

import pytest
from webcli import cli, cli_json

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bench"
WAIT_S = 60


def wait(drv, script, timeout=WAIT_S):
    """Poll a JavaScript expression until it is truthy; its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = drv.execute_script(f"return {script}")
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {script}")


def value(drv, id_):
    raw = drv.execute_script(f"return document.getElementById('{id_}').dataset.value")
    return float(raw) if raw else None


def type_into(drv, id_, text):
    el = drv.find_element("id", id_)
    drv.execute_script("arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input', {bubbles: true}))",
                       el, text)


def not_blank(drv, path: Path):
    """Save a screenshot; it must hold more than a background: many colours, ink over a good part."""
    import numpy as np
    from PIL import Image

    drv.save_screenshot(str(path))
    px = np.asarray(Image.open(path).convert("RGB").resize((200, 200))).reshape(-1, 3).astype(int)
    colours = len(np.unique(px, axis=0))
    ink = float((px.sum(axis=1) < 600).mean())
    assert colours > 50 and ink > 0.02, (path, colours, ink)


SCENARIO = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "batch": "8", "prompt-len": "2048", "output-len": "300",
            "tp": "2"}


def check_estimate(drv, params):
    want = cli_json("estimate", *[x for k, v in params.items() for x in (f"--{k}", v)])
    wait(drv, f"document.getElementById('ttft').dataset.value == '{want['ttft_s']}'")
    assert value(drv, "ttft") == want["ttft_s"]
    assert value(drv, "tpot") == want["tpot_s"]
    assert value(drv, "e2e") == want["e2e_s"]
    assert value(drv, "throughput") == want["output_tokens_per_s"]
    assert value(drv, "usd") == want["usd_per_million_output_tokens"]
    assert value(drv, "memory") == want["memory"]["total_bytes"]
    return want


def test_estimate_page_shows_the_cli_numbers(base, chrome, shots):
    from urllib.parse import urlencode

    chrome.get(f"{base}/estimate?{urlencode(SCENARIO)}")
    want = check_estimate(chrome, SCENARIO)
    assert chrome.find_element("id", "ttft").text.endswith("ms")
    # memory bar: weights, KV, activations against the capacity line (charts come when plotly.js is in)
    wait(chrome, "document.getElementById('roofline-chart').data && document.getElementById('memory-chart').data")
    bars = chrome.execute_script("return document.getElementById('memory-chart').data.map(t => t.x[0] * 1e9)")
    m = want["memory"]
    assert bars == pytest.approx([m["weights_bytes"], m["kv_cache_bytes"], m["activation_bytes"]], rel=1e-12)
    # the roofline: one point per operator that does work, in both phases
    ops = cli_json("ops", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", 2, "--phase", "decode",
                   "--batch", 8, "--seq-len", 2048)
    shown = chrome.execute_script("return document.getElementById('roofline-chart').data[2].x")
    assert sorted(shown) == pytest.approx(sorted(o["intensity"] for o in ops["ops"]
                                                 if o["flops"] > 0 and o["time_s"] > 0 and o["intensity"] > 0))
    rows = chrome.find_elements("css selector", "#ops-decode tbody tr")
    assert len(rows) == len(ops["ops"]) and rows[0].text.startswith(ops["ops"][0]["op"])
    not_blank(chrome, shots / "estimate.png")
    # change inputs: the numbers follow, and the URL keeps the state
    type_into(chrome, "batch", "32")
    check_estimate(chrome, {**SCENARIO, "batch": "32"})
    chrome.execute_script("const s = document.getElementById('hardware'); s.value = 'h200';"
                          "s.dispatchEvent(new Event('input', {bubbles: true}))")
    check_estimate(chrome, {**SCENARIO, "batch": "32", "hardware": "h200"})
    url = chrome.current_url
    assert "batch=32" in url and "hardware=h200" in url
    chrome.get(url)  # the link reproduces the view
    check_estimate(chrome, {**SCENARIO, "batch": "32", "hardware": "h200"})


def test_a_malformed_input_shows_the_cli_line(base, chrome):
    chrome.get(f"{base}/estimate?model=llama-3.1-8b&hardware=h100-sxm")
    wait(chrome, "document.getElementById('ttft').dataset.value")
    type_into(chrome, "batch", "8x")
    _, _, err = cli("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", "8x")
    wait(chrome, "!document.getElementById('error').hidden")
    assert chrome.find_element("id", "error").text == err.strip()
    type_into(chrome, "batch", "<img src=x onerror=alert(1)>")
    wait(chrome, "document.getElementById('error').textContent.includes('<img')")  # shown as text, not markup
    assert chrome.find_elements("css selector", "#error img") == []


def test_explore_page_draws_curves_and_follows_the_slider(base, chrome, shots):
    chrome.get(f"{base}/explore")
    wait(chrome, "document.getElementById('chart-tpot').dataset.points == '800'")
    not_blank(chrome, shots / "explore.png")
    chrome.execute_script("const s = document.getElementById('fixed'); s.value = '4096';"
                          "s.dispatchEvent(new Event('input', {bubbles: true}))")
    want = cli_json("estimate", "--model", "mistral-7b", "--hardware", "l4", "--batch", 8, "--prompt-len", 4096)
    got = wait(chrome, "(() => { const d = document.getElementById('chart-tpot').data; "
                       "const t = d.find(t => t.name === 'mistral-7b on l4'); "
                       "return t && t.x.indexOf(8) >= 0 && new URLSearchParams(location.search).get('fixed') == '4096' "
                       "&& document.getElementById('chart-tpot').dataset.fixed == '4096' ? t.y[t.x.indexOf(8)] : null })()")
    assert got == pytest.approx(want["tpot_s"], rel=1e-12)


def test_plan_page_runs_a_small_plan_and_opens_its_report(base, chrome, shots):
    chrome.get(f"{base}/plan?hardware=l4,h100-sxm&tps=1&requests=100&rate=4&max-gpus=2")
    wait(chrome, "document.getElementById('yaml').value.includes('\"requests\": 100')")
    chrome.find_element("id", "run").click()
    assert wait(chrome, "document.body.dataset.plan", 10)
    wait(chrome, "['done', 'failed'].includes(document.body.dataset.plan)", 180)
    assert chrome.execute_script("return document.body.dataset.plan") == "done", \
        chrome.find_element("id", "error").text
    assert "job=" in chrome.current_url
    assert chrome.find_element("id", "answer").text.startswith("cheapest meeting the SLOs: ")
    chrome.switch_to.frame(chrome.find_element("id", "report"))
    try:
        wait(chrome, "document.querySelector('h1') && document.querySelector('h1').textContent")
        assert "Capacity plan" in chrome.find_element("css selector", "h1").text
    finally:
        chrome.switch_to.default_content()
    chrome.execute_script("document.getElementById('run').scrollIntoView()")
    not_blank(chrome, shots / "plan.png")


def test_compare_page_uploads_a_benchmark_file(base, chrome, shots):
    name = "vllm-serve-concurrency16.json"
    chrome.get(f"{base}/compare?hardware=h100-sxm")
    wait(chrome, "document.getElementById('hardware').value == 'h100-sxm'")
    chrome.find_element("id", "files").send_keys(str(FIXTURES / name))
    rows = int(wait(chrome, "document.getElementById('metrics').dataset.rows"))
    want = cli_json("compare", FIXTURES / name, "--hardware", "h100-sxm")
    assert rows == sum(len(r["metrics"]) for r in want["runs"])
    first = want["runs"][0]["metrics"][0]
    cells = chrome.find_elements("css selector", "#metrics tbody tr")[0].find_elements("tag name", "td")
    assert cells[3].text == first["metric"] and cells[6].text == f"{100 * first['error']:.1f}%"
    not_blank(chrome, shots / "compare.png")


def test_compare_page_takes_the_replicas_behind_the_endpoint(base, chrome):
    name = "vllm-serve-concurrency16.json"
    chrome.get(f"{base}/compare?hardware=h100-sxm&gpus=2")
    wait(chrome, "document.getElementById('gpus').value == '2'")
    chrome.find_element("id", "files").send_keys(str(FIXTURES / name))
    wait(chrome, "document.getElementById('metrics').dataset.rows")
    want = cli_json("compare", FIXTURES / name, "--hardware", "h100-sxm", "--gpus", "2")["runs"][0]["metrics"]
    cells = [[td.text for td in tr.find_elements("tag name", "td")]
             for tr in chrome.find_elements("css selector", "#metrics tbody tr")]
    assert [c[6] for c in cells] == ["-" if m["error"] is None else f"{100 * m['error']:.1f}%" for m in want]


def test_catalog_page_lists_every_model_and_gpu_with_sources(base, chrome, shots):
    from calc.spec.catalog import hardware_catalog, model_catalog

    chrome.get(f"{base}/catalog")
    wait(chrome, "document.body.dataset.ready")
    assert len(chrome.find_elements("css selector", "#models tbody tr")) == len(model_catalog())
    assert len(chrome.find_elements("css selector", "#hardware tbody tr")) == len(hardware_catalog())
    assert chrome.find_elements("css selector", "#models tbody a[href^='https://huggingface.co/']")
    not_blank(chrome, shots / "catalog.png")
    type_into(chrome, "q", "llama")
    n = sum("llama" in m for m in model_catalog())
    wait(chrome, f"document.querySelectorAll('#models tbody tr').length <= {n}")
    assert "q=llama" in chrome.current_url


def test_estimate_page_shows_the_prediction_bands(base, chrome):
    chrome.get(f"{base}/estimate")
    wait(chrome, "document.body.dataset.numbers")
    # the estimate record's <name>_band_s (the prediction bands); the page reads both shapes
    assert chrome.execute_script("return bandText({ttft_band_s: [0.1, 0.25]}, 'ttft')") == "band 100 ms – 250 ms"
    assert chrome.execute_script("return bandText({tpot_band_s: {low: 0.004, high: 0.006}}, 'tpot')") == \
        "band 4.00 ms – 6.00 ms"
    assert chrome.execute_script("return bandText({}, 'e2e')") == ""
    want = cli_json("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm")  # the page's defaults
    for key, band in (("ttft", "ttft_band_s"), ("tpot", "tpot_band_s"), ("e2e", "e2e_band_s"),
                      ("throughput", "output_tokens_band_per_s")):
        shown = chrome.execute_script(f"return document.getElementById('{key}-band').dataset.band")
        assert [float(x) for x in shown.split(",")] == want[band]
        assert chrome.find_element("id", f"{key}-band").text.startswith("band ")


def test_plan_page_takes_an_uploaded_workload_and_cancels_it(base, chrome):
    workload = Path(__file__).resolve().parents[3] / "reports" / "plans" / "workloads" / "chat-llama-3.1-8b.yaml"
    chrome.get(f"{base}/plan")
    wait(chrome, "document.getElementById('yaml').value")
    chrome.find_element("id", "yaml-file").send_keys(str(workload))
    wait(chrome, "document.getElementById('yaml').value.includes('name: chat-llama-3.1-8b')")
    chrome.find_element("id", "run").click()
    wait(chrome, "document.body.dataset.plan == 'running'", 30)
    chrome.find_element("id", "cancel").click()
    wait(chrome, "['cancelled', 'done'].includes(document.body.dataset.plan)", 120)
    assert chrome.execute_script("return document.body.dataset.plan") == "cancelled"
    assert chrome.find_element("id", "status").text.startswith("cancelled: ")
