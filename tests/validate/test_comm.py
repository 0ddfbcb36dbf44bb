"""The communication model against torch.distributed (gloo, 2 CPU processes)."""

import csv

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("torch")

from calc import load_model  # noqa: E402
from calc.cli.app import app  # noqa: E402
from calc.cost.latency import estimate  # noqa: E402
from calc.cost.setup import Setup
from calc.spec.catalog import HARDWARE_DIR, build  # noqa: E402
from calc.spec.hardware import HardwareSpec  # noqa: E402
from validate.comm import fit, validate_comm, worker_env  # noqa: E402


def test_fit_recovers_a_known_link():
    # synthetic ring all-reduce at 10 GB/s and 5 us per hop over 4 ranks
    sizes = [2**k for k in range(10, 25)]
    times = [2 * 3 / 4 * s / 10e9 + 6 * 5e-6 for s in sizes]
    bw, hop = fit(sizes, times, 4, "all_reduce")
    assert bw == pytest.approx(10e9, rel=1e-6) and hop == pytest.approx(5e-6, rel=1e-6)


def test_validate_comm_gloo_two_processes(tmp_path):
    out = tmp_path / "comm"
    r = CliRunner().invoke(app, ["validate-comm", "--world-size", "2", "--quick", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "measured vs modelled" in r.output and "all_reduce" in r.output
    rows = list(csv.DictReader((out / "comm.csv").open()))
    assert {row["op"] for row in rows} == {"all_reduce", "all_to_all"}
    for row in rows:
        assert float(row["measured_s"]) > 0 and float(row["modelled_s"]) > 0
    # the fitted block plugs into a hardware profile and drives a TP=2 estimate
    block = yaml.safe_load((out / "interconnect.yaml").read_text())["interconnect"]
    assert block["bandwidth_gb_s_per_direction"] > 0 and block["latency_us"] >= 0
    data = yaml.safe_load((HARDWARE_DIR / "cpu-generic-2core.yaml").read_text())
    hw = build(HardwareSpec, {**data, "interconnect": block}, "measured.yaml")
    est = estimate(load_model("tiny-decoder"), hw, 2, 128, 16, Setup.of(tp=2))
    assert float(est.decode.comm_s) > 0


def test_validate_comm_bad_input():
    r = CliRunner().invoke(app, ["validate-comm", "--world-size", "1"])
    assert r.exit_code == 2 and "at least 2" in r.output
    r = CliRunner().invoke(app, ["validate-comm", "--backend", "mpi"])
    assert r.exit_code == 2 and "--backend" in r.output


def test_workers_stay_on_loopback(tmp_path, monkeypatch):
    # environment: rendezvous on 127.0.0.1, gloo bound to the loopback interface
    monkeypatch.setenv("MASTER_ADDR", "example.invalid")  # a caller's value does not leak through
    env = worker_env(2, "gloo", 29500)
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert env["GLOO_SOCKET_IFNAME"] in ("lo", "lo0") and env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"]
    # rendezvous: every inet socket the two workers held (store and gloo pairs) is on loopback
    res = validate_comm(2, tmp_path / "comm", "gloo", quick=True, repeats=2)
    import ipaddress

    assert res["addresses"], "the workers reported no sockets"
    def loopback(text):
        ip = ipaddress.ip_address(text.split("%")[0])
        mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1
        return ip.is_loopback or (mapped is not None and mapped.is_loopback)

    assert all(loopback(a) for a in res["addresses"]), res["addresses"]
