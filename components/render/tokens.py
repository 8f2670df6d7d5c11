"""The token stream as HTML: every generated token coloured by its fate, iteration boundaries
visible, per-token hover details (p, q, α, u), the selected iteration highlighted.

Every piece of model or user text is HTML-escaped here (``html.escape``) before it reaches the page.
Colours come from the Okabe-Ito palette, and each fate also has a shape cue (strike-through,
dashed or double border) so the stream reads in greyscale and on a projector.
"""
from __future__ import annotations

import html

from specdec_core import Trace
from specdec_core.trace import DraftRecord, IterationRecord

from components.render import palette as pal
from components.render.base import fmt

CSS = f"""
.sd-tokens {{ font-family: {pal.FONT}; font-size: 18px; line-height: 2.1; color: #111; background: #fff;
  padding: 10px 12px; border-radius: 8px; border: 1px solid #ddd; }}
.sd-legend {{ font-size: 14px; line-height: 1.9; margin-bottom: 6px; color: #333; }}
.sd-legend .sd-tok {{ margin-right: 10px; }}
.sd-stream {{ white-space: pre-wrap; word-break: break-word; }}
.sd-empty {{ color: #666; font-style: italic; }}
.sd-tok {{ padding: 1px 2px; margin: 0 1px; border-radius: 4px; border: 2px solid transparent; color: #111; }}
.sd-acc {{ background: {pal.ACCEPTED}33; border-bottom: 3px solid {pal.ACCEPTED}; }}
.sd-rej {{ background: {pal.REJECTED}26; color: #7a2a00; text-decoration: line-through;
  text-decoration-color: {pal.REJECTED}; text-decoration-thickness: 2px; }}
.sd-skip {{ color: #595959; text-decoration: line-through; text-decoration-style: dotted; border: 1px dotted #aaa; }}
.sd-res {{ background: {pal.RESAMPLED}2e; border: 2px dashed {pal.RESAMPLED}; }}
.sd-bonus {{ background: {pal.BONUS}38; border: 3px double {pal.BONUS}; }}
.sd-plain {{ background: #eee; }}
.sd-it {{ border-left: 2px solid #9a9a9a; padding: 2px 2px 2px 3px; margin-left: 3px; border-radius: 3px; }}
.sd-idx {{ font-size: 11px; color: #666; vertical-align: super; margin-right: 2px; user-select: none; }}
.sd-sel {{ outline: 3px solid #111; background: #fff3c4; }}
.sd-sel .sd-idx {{ color: #000; font-weight: 700; }}
"""

FATES = (("sd-acc", "accepted draft"), ("sd-rej", "rejected draft"), ("sd-skip", "not tested (after a rejection)"),
         ("sd-res", "resampled"), ("sd-bonus", "bonus"))


def shown_text(text: str) -> str:
    """Escaped token text with visible newlines (↵ then a real line break) and tabs."""
    escaped = html.escape(text, quote=False)
    return escaped.replace("\r", "").replace("\t", "⇥\t").replace("\n", "↵\n") or "∅"


def _attr(text: str) -> str:
    return html.escape(text, quote=True)


def _span(cls: str, text: str, title: str) -> str:
    return f'<span class="sd-tok {cls}" title="{_attr(title)}">{shown_text(text)}</span>'


def _num(x: float | None) -> str:
    return fmt(x, 4)


def draft_title(j: int, d: DraftRecord, k: int) -> str:
    fate = "accepted" if d.accepted else ("rejected" if d.tested else "not tested (after the first rejection)")
    lines = [f"draft {j + 1}/{k} · {fate} · token id {d.token_id}",
             f"p = {_num(d.p)}   q = {_num(d.q)}   α = {_num(d.alpha)}   u = {_num(d.u)}"]
    if d.p_raw is not None or d.q_raw is not None:
        lines.append(f"unwarped p = {_num(d.p_raw)}   q = {_num(d.q_raw)}")
    return "\n".join(lines)


def iteration_html(it: IterationRecord, selected: bool = False, greedy: bool = False) -> str:
    """One iteration: accepted drafts, the rejected (struck) and untested drafts where they were
    proposed, then the resampled (greedy: the target's argmax) or bonus token."""
    n_acc = sum(d.accepted for d in it.drafts)
    parts = [f'<span class="sd-idx">{it.index + 1}</span>']
    for j, d in enumerate(it.drafts):
        cls = "sd-acc" if d.accepted else ("sd-rej" if d.tested else "sd-skip")
        parts.append(_span(cls, d.text or f"#{d.token_id}", draft_title(j, d, len(it.drafts))))
    for tok in it.emitted[n_acc:]:
        if it.resampled is not None and tok == it.resampled.token_id:
            rs = it.resampled
            at = (f"at depth {rs.position + 1}, where every child failed" if it.tree is not None
                  else f"in place of draft {rs.position + 1}")
            title = (f"the target's own choice (argmax p, greedy) {at} · token id {rs.token_id}" if greedy else
                     f"resampled {at} from the residual · token id {rs.token_id}\n"
                     f"p = {_num(rs.p)}   residual = {_num(rs.residual_prob)}")
            parts.append(_span("sd-res", rs.text or f"#{rs.token_id}", title))
        elif it.bonus is not None and tok == it.bonus.token_id:
            parts.append(_span("sd-bonus", it.bonus.text or f"#{tok}",
                               f"bonus: {'the path reached a leaf' if it.tree else 'all drafts accepted'}, sampled "
                               f"from p · token id {tok}\np = {_num(it.bonus.p)}"))
        else:
            parts.append(_span("sd-plain", f"#{tok}", f"emitted token id {tok}"))
    drafted = (f"{n_acc} of a tree's {len(it.tree.nodes)} nodes on the accepted path" if it.tree is not None
               else f"{n_acc}/{len(it.drafts)} drafts accepted")
    o_title = f"iteration {it.index + 1}: {drafted}, {len(it.emitted)} tokens emitted"
    cls = "sd-it sd-sel" if selected else "sd-it"
    return f'<span class="{cls}" data-it="{it.index}" title="{_attr(o_title)}">{"".join(parts)}</span>'


def legend_html(greedy: bool = False) -> str:
    fates = [(cls, "the target's choice (argmax p)" if greedy and cls == "sd-res" else name) for cls, name in FATES]
    chips = "".join(f'<span class="sd-tok {cls}">{html.escape(name)}</span>' for cls, name in fates)
    return (f'<div class="sd-legend">{chips}<span class="sd-it"><span class="sd-idx">n</span>'
            "iteration boundary</span> · hover a token for p, q, α, u</div>")


def tokens_html(trace: Trace | None, selected: int | None = None, message: str = "") -> str:
    """The whole token stream (with its legend and a <style> block) as one self-contained HTML string.
    ``selected`` is the 0-based iteration to highlight; ``message`` is shown (escaped) above the stream."""
    greedy = trace is not None and trace.config.get("temperature", 0) == 0 and bool(trace.iterations)
    head = f"<style>{CSS}</style>" + legend_html(greedy)
    note = f'<div class="sd-empty">{html.escape(message)}</div>' if message else ""
    if trace is None or not trace.iterations:
        body = note or '<div class="sd-empty">Press Run: the generated tokens appear here as they are decided.</div>'
        return f'<div class="sd-tokens">{head}{body}</div>'
    stream = "".join(iteration_html(it, it.index == selected, greedy) for it in trace.iterations)
    return f'<div class="sd-tokens">{head}{note}<div class="sd-stream">{stream}</div></div>'
