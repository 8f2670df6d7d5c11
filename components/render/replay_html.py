"""A standalone replay: one self-contained HTML file that shows a trace without Python, a server or a network —
for slides, a learning platform, or a classroom.

``replay_html(trace)`` writes the page: the run's summary and token stream (``summary``, ``tokens``), and the
anatomy of each iteration, built here by the same ``anatomy_figure`` the app draws, once per iteration, and
embedded as Plotly JSON; the page's script only swaps the precomputed figure (``Plotly.react``) and moves the
highlight in the token stream when the viewer steps (← / →, Home / End, the buttons, or a click on an
iteration). plotly.js is inlined from the plotly package, the trace itself is embedded too (the page offers it
as a download), and a Content-Security-Policy forbids any request. Every piece of embedded JSON is escaped for
a ``<script>`` element (``script_json``: a token text of ``</script>`` stays text).

"""
from __future__ import annotations

import html
import json
from typing import Any

from plotly.offline import get_plotlyjs

from specdec_core import Trace

from components.render.anatomy import anatomy_figure
from components.render.base import instructive_index
from components.render.summary import summary_html
from components.render.tokens import tokens_html

MAX_ITERATIONS = 1000    # ~6 KB of figure JSON each; this 2-core CPU builds 15-50 anatomy figures a second (by load)
CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:")
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
_SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}

PAGE_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 18px auto; max-width: 1200px;
  padding: 0 14px; color: #222; }
h1 { font-size: 22px; margin: 0 0 4px; }
.sd-meta { color: #444; font-size: 14px; margin-bottom: 10px; }
.sd-prompt { white-space: pre-wrap; background: #f6f6f6; border-radius: 6px; padding: 6px 10px; font-size: 14px; }
.sd-nav { display: flex; gap: 8px; align-items: center; margin: 12px 0 6px; position: sticky; top: 0;
  background: #fff; padding: 6px 0; z-index: 2; }
.sd-nav button { font-size: 15px; padding: 5px 12px; border-radius: 6px; border: 1px solid #999; background: #fafafa;
  cursor: pointer; }
.sd-nav button:disabled { opacity: 0.4; cursor: default; }
#sd-position { font-weight: 600; min-width: 130px; }
.sd-hint { color: #555; font-size: 13px; }
.sd-it { cursor: pointer; }
.sd-summary table { border-collapse: collapse; width: 100%; font-size: 14px; }
.sd-summary th, .sd-summary td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #e3e3e3; }
.sd-summary .sd-label, .sd-summary .sd-note { font-size: 13px; color: #444; margin: 4px 0; }
footer { color: #666; font-size: 12px; margin: 16px 0; }
"""

PAGE_JS = """
(() => {
  const read = (id) => JSON.parse(document.getElementById(id).textContent);
  const figures = read("sd-figures"), template = read("sd-template"), start = read("sd-start");
  const n = figures.length;
  const position = document.getElementById("sd-position");
  const buttons = {first: -1e9, prev: -1, next: 1, last: 1e9};
  let current = -1;
  const show = (i) => {
    i = Math.max(0, Math.min(n - 1, i));
    if (i === current) return;
    current = i;
    const fig = figures[i];
    fig.layout.template = template;
    Plotly.react("sd-anatomy", fig.data, fig.layout, CONFIG);
    document.querySelectorAll(".sd-stream .sd-it").forEach((el) =>
      el.classList.toggle("sd-sel", Number(el.dataset.it) === i));
    position.textContent = "iteration " + (i + 1) + " / " + n;
    for (const [id, step] of Object.entries(buttons)) {
      document.getElementById("sd-" + id).disabled = step < 0 ? i === 0 : i === n - 1;
    }
  };
  for (const [id, step] of Object.entries(buttons)) {
    document.getElementById("sd-" + id).addEventListener("click", () => show(current + step));
  }
  document.querySelectorAll(".sd-stream .sd-it").forEach((el) =>
    el.addEventListener("click", () => show(Number(el.dataset.it))));
  const keys = {ArrowLeft: -1, ArrowRight: 1, Home: -1e9, End: 1e9};
  document.addEventListener("keydown", (e) => {
    if (!(e.key in keys) || e.ctrlKey || e.metaKey || e.altKey) return;
    e.preventDefault();
    show(current + keys[e.key]);
  });
  const blob = new Blob([document.getElementById("sd-trace").textContent], {type: "application/json"});
  document.getElementById("sd-download").href = URL.createObjectURL(blob);
  show(start);
})();
"""


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element: ``<``, ``>``, ``&`` and the two JavaScript
    line separators as \\u escapes (the same value for JSON.parse; no ``</script>`` or ``<!--`` can occur)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for char, escape in _SCRIPT_ESCAPES.items():
        text = text.replace(char, escape)
    return text


def anatomy_figures(trace: Trace) -> tuple[list[dict], dict]:
    """Each iteration's anatomy figure as Plotly JSON (``anatomy_figure``, the app's own) without its template,
    and the template they share (embedded once)."""
    figures, template = [], {}
    for i in range(len(trace.iterations)):
        fig = json.loads(anatomy_figure(trace, i).to_json())
        template = fig["layout"].pop("template", template)
        figures.append(fig)
    return figures, template


def _meta(trace: Trace) -> str:
    cfg = trace.config
    parts = [f"target {cfg.get('target', '?')}", f"draft {cfg.get('draft', cfg.get('drafter', '?'))}",
             f"K = {cfg.get('k')}" + (f" ({cfg.get('k_policy')} K policy, K is the cap)"
                                      if cfg.get("k_policy") not in (None, "fixed") else ""),
             "greedy" if cfg.get("temperature", 0) == 0 else f"temperature {cfg.get('temperature')}",
             f"seed {cfg.get('seed', '?')}", f"{trace.stats.new_tokens} tokens in {len(trace.iterations)} iterations"]
    return html.escape(" · ".join(str(p) for p in parts))


def replay_html(trace: Trace) -> str:
    """The standalone replay page of ``trace`` (one HTML document, no external resource). ValueError when the
    trace has no iteration or more than MAX_ITERATIONS."""
    n = len(trace.iterations)
    if n == 0:
        raise ValueError("the trace has no iterations to replay")
    if n > MAX_ITERATIONS:
        raise ValueError(f"the trace has {n} iterations; a standalone replay holds at most {MAX_ITERATIONS}")
    figures, template = anatomy_figures(trace)
    start = instructive_index(trace)
    config = script_json(PLOT_CONFIG)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Speculative decoding replay</title>
<style>{PAGE_CSS}</style>
</head>
<body>
<h1>Speculative decoding, iteration by iteration</h1>
<div class="sd-meta">{_meta(trace)}</div>
<div class="sd-prompt"><b>prompt</b> {html.escape(trace.prompt)}</div>
<div class="sd-nav">
  <button id="sd-first" title="Home">|◀ first</button><button id="sd-prev" title="←">◀ previous</button>
  <span id="sd-position"></span>
  <button id="sd-next" title="→">next ▶</button><button id="sd-last" title="End">last ▶|</button>
  <span class="sd-hint">← / → step · Home / End · click an iteration in the text</span>
</div>
<div id="sd-anatomy" style="height: 560px"></div>
{tokens_html(trace, start)}
{summary_html(trace)}
<footer>Exported by the Speculative Decoding Explorer. p = target, q = draft. This page needs no network;
<a id="sd-download" download="trace.json">the trace (JSON)</a> can be replayed in the app's Replay tab.</footer>
<script type="application/json" id="sd-trace">{script_json(trace.to_dict())}</script>
<script type="application/json" id="sd-figures">{script_json(figures)}</script>
<script type="application/json" id="sd-template">{script_json(template)}</script>
<script type="application/json" id="sd-start">{start}</script>
<script>{get_plotlyjs()}</script>
<script>const CONFIG = {config};{PAGE_JS}</script>
</body>
</html>
"""


__all__ = ["replay_html", "script_json", "anatomy_figures", "MAX_ITERATIONS"]
