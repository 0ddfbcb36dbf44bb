"""The plan's launch commands (calc.serving.planner.launch) in the report, the terminal and JSON."""

from __future__ import annotations

from calc.render.doc import Doc


def launch_records(plan) -> list[dict]:
    return [{"role": role, **cmd.record()} for role, cmd in plan.launches()]


def _title(role: str, cmd) -> str:
    what = {"replica": "each replica", "prefill": "each prefill replica", "decode": "each decode replica"}[role]
    return f"{what} ({cmd.replicas} in all, behind a load balancer)"


def launch_section(d: Doc, plan) -> None:
    """A "How to launch it" section: per command, the shell lines and what each flag assumes."""
    launches = plan.launches()
    d.h(2, "How to launch it")
    if not launches:
        preset = plan.workload.hardware[0].preset
        d.p(f"No launch command: the engine preset {preset.name if preset else 'default'} models no serving "
            "engine (name one in the workload: engine: vllm, sglang, trtllm, lmdeploy or tgi)."
            if plan.answer is not None else "No launch command: no configuration meets the SLOs.")
        return
    d.p("The engine's own command for the answer, with every setting the simulation ran: the batch limits, "
        "token budget, KV share, parallelism and speculative settings. Use your own checkpoint path "
        "(an instruct model of the same architecture); the model id is the one the model spec cites.")
    for role, cmd in launches:
        d.p(f"**{cmd.engine}, {_title(role, cmd)}:**")
        d.pre(cmd.shell())
        d.table(["flag", "value", "what the plan assumed"],
                [[f.name, "(switch)" if f.value is None else str(f.value), f.assumes] for f in cmd.flags])
        if cmd.notes:
            d.ul(list(cmd.notes))


def launch_text(plan) -> list[str]:
    """Terminal lines: each command on one line."""
    out = []
    for role, cmd in plan.launches():
        out += [f"Launch ({cmd.engine}, {_title(role, cmd)}):", cmd.shell()]
        out += [f"  note: {n}" for n in cmd.notes]
    return out + [""] if out else out
