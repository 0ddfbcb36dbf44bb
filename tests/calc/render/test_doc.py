"""Reports show user text; they never run it."""

from calc.render.doc import Doc


def test_html_in_user_text_is_shown_not_run_in_both_renderings():
    d = Doc()
    name = "<script>alert(1)</script> & <img src=x onerror=y>"
    d.h(1, f"Capacity plan: {name}")
    d.p("TTFT p99 < 1 s, TPOT <= 40 ms, `<b>code</b>`")
    d.table(["workload"], [[name]])
    d.ul([name])
    md, page = d.markdown(), d.html("t")
    assert "<script" not in md and "<img" not in md and "&lt;script>" in md
    assert "p99 < 1 s" in md and "<= 40 ms" in md and "`<b>code</b>`" in md
    assert "<script" not in page and "<img src" not in page and "&lt;script&gt;" in page
