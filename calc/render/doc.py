"""A report as blocks (headings, paragraphs, tables, bullet lists, images), rendered twice:
markdown with the charts as PNG files beside it, and one self-contained HTML file with the
same charts embedded as base64."""

from __future__ import annotations

import base64
import html
import re

from calc.core import text as render


class Doc:
    """Blocks rendered to markdown and to HTML. Inline markup: **bold** and `code`."""

    def __init__(self):
        self.blocks: list[tuple] = []

    def h(self, level: int, text: str):
        self.blocks.append(("h", level, text))

    def p(self, text: str):
        self.blocks.append(("p", text))

    def ul(self, items: list[str]):
        self.blocks.append(("ul", items))

    def table(self, headers: list[str], rows: list[list[str]], align: str | None = None):
        self.blocks.append(("table", headers, rows, align or "l" * len(headers)))

    def pre(self, text: str):
        """Preformatted text (a text table): a fenced block in markdown, <pre> in HTML."""
        self.blocks.append(("pre", text))

    def img(self, name: str, alt: str, png: bytes):
        self.blocks.append(("img", name, alt, png))

    def markdown(self) -> str:
        md = self._md
        out = []
        for b in self.blocks:
            kind = b[0]
            if kind == "h":
                out.append("#" * b[1] + " " + md(b[2]))
            elif kind == "p":
                out.append(md(b[1]))
            elif kind == "ul":
                out.append("\n".join(f"- {md(i)}" for i in b[1]))
            elif kind == "table":
                _, headers, rows, align = b
                out.append(render.markdown_table([md(h) for h in headers], [[md(str(c)) for c in r] for r in rows],
                                                 align))
            elif kind == "img":
                out.append(f"![{md(b[2])}]({b[1]})")
            elif kind == "pre":
                out.append(f"```\n{b[1]}\n```")
        return "\n\n".join(out) + "\n"

    @staticmethod
    def _md(text: str) -> str:
        """Markdown text with any HTML in it (a workload named ``<script>...``) shown, not run: a ``<``
        that could open a tag or comment (before a letter, /, ! or ?) outside code spans becomes
        ``&lt;``; "p99 < 1 s" and "<=" stay as written, and a code span shows its text as typed."""
        parts = re.split(r"(`[^`]*`)", text)
        return "".join(p if p.startswith("`") and p.endswith("`") and len(p) > 1 else
                       re.sub(r"<(?=[A-Za-z/!?])", "&lt;", p) for p in parts)

    @staticmethod
    def _inline(text: str) -> str:
        t = html.escape(text, quote=False)
        t = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", t)
        return re.sub(r"`(.+?)`", r"<code>\1</code>", t)

    def html(self, title: str) -> str:
        body = []
        for b in self.blocks:
            kind = b[0]
            if kind == "h":
                body.append(f"<h{b[1]}>{self._inline(b[2])}</h{b[1]}>")
            elif kind == "p":
                body.append(f"<p>{self._inline(b[1])}</p>")
            elif kind == "ul":
                body.append("<ul>" + "".join(f"<li>{self._inline(i)}</li>" for i in b[1]) + "</ul>")
            elif kind == "table":
                _, headers, rows, align = b
                style = lambda a: ' class="r"' if a == "r" else ""  # noqa: E731
                head = "".join(f"<th{style(a)}>{self._inline(h)}</th>" for h, a in zip(headers, align, strict=True))
                trs = "".join("<tr>" + "".join(f"<td{style(a)}>{self._inline(str(c))}</td>"
                                               for c, a in zip(r, align, strict=True)) + "</tr>" for r in rows)
                body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>")
            elif kind == "pre":
                body.append(f"<pre>{html.escape(b[1], quote=False)}</pre>")
            elif kind == "img":
                data = base64.b64encode(b[3]).decode("ascii")
                body.append(f'<figure><img alt="{html.escape(b[2])}" src="data:image/png;base64,{data}">'
                            f"<figcaption>{html.escape(b[2])}</figcaption></figure>")
        css = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
               "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
               "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}td.r,th.r{text-align:right}"
               "th{background:#f3f3f3}code{background:#f3f3f3;padding:0 3px}img{max-width:100%}"
               "figcaption{font-size:0.85em;color:#555}")
        return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
                f"<style>{css}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
