"""A batched run's views (``trace.batch``, schema "specdec-trace/2"): pure builders Trace -> HTML / go.Figure.

- ``rows_html``: every row's tokens side by side, coloured by fate as the token stream colours them (row 1 is your
  request, the others other users' requests): a grid that stacks into one column on a phone, each row scrolling
  inside its own box, so the page never scrolls sideways;
- ``batch_summary_html`` and ``batch_summary_line`` (plain text, for /generate): per row and pooled, the two
  acceptance figures engines report and users confuse — the **per-draft acceptance rate** (accepted ÷ drafted) and
  the **mean acceptance length** (tokens emitted per target forward, the bonus or resampled token counted) —, the
  pooled measured speedup over the batched baseline and whether every row's text equals its baseline row;
- ``batch_timeline_figure``: the batch's forwards on its own clock (each iteration's draft steps, its ONE verify
  for every active row, the host time), the batched baseline's steps beneath, and the rows still in the batch and
  the K asked of them over time;
- ``batch_acceptance_figure``: the two acceptance figures for each row and pooled.

Only what the engine recorded, counted and divided. A trace without a batch gives "" (HTML) or a figure that says
so. Every text that comes from the trace is escaped.
"""
from __future__ import annotations

import html
from itertools import accumulate

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec_core import Trace
from specdec_core.stats.intervals import wilson

from components.render import palette as pal
from components.render.base import apply_layout, empty_figure, is_greedy
from components.render.measures import identical_to_baseline
from components.render.summary import FINISH, esc
from components.render.time import hbar
from components.render.tokens import iteration_html, legend_html

RATE_NAME = "per-draft acceptance rate"
RATE_MEANS = "accepted ÷ drafted"
LENGTH_NAME = "mean acceptance length"
LENGTH_MEANS = "tokens emitted per target forward, the bonus or resampled token counted"
REQUEST_CHARS = 140            # a row's request is shown up to this many characters (all of it on hover)

# the page's stylesheet (app.PAGE_CSS, after the summary's rules, with the token stream's): the rows in a grid that
# stacks on a phone, each scrolling inside itself; a narrower summary table that fits a phone

CSS = """
.sd-batch-head { font-size: 14px; line-height: 1.5; color: #222; margin: 0 0 6px; }
.sd-batch-grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 300px), 1fr)); gap: 10px; }
.sd-row { border: 1px solid #bbb; border-radius: 8px; padding: 6px 8px; max-height: 340px; overflow-y: auto;
  min-width: 0; line-height: 2.0; }
.sd-row:focus-visible { outline: 3px solid #0072B2; }
.sd-row-you { border: 2px solid #111; }
.sd-row h4 { margin: 0; font-size: 15px; line-height: 1.4; }
.sd-row .sd-stream { word-break: normal; overflow-wrap: break-word; }
.sd-row .sd-request, .sd-row .sd-row-figs { font-size: 13px; line-height: 1.4; color: #333; margin: 2px 0 4px;
  overflow-wrap: anywhere; }
.sd-batch-summary table { font-size: 13px; table-layout: fixed; }
.sd-batch-summary th, .sd-batch-summary td { vertical-align: top; padding: 3px 3px; overflow-wrap: break-word; }
.sd-batch-summary .sd-pooled th, .sd-batch-summary .sd-pooled td { border-top: 2px solid #777; font-weight: 600; }
"""


def row_label(b: int) -> str:
    """Row ``b`` (0-based) as the page names it."""
    return "row 1 · your request" if b == 0 else f"row {b + 1} · another user's request"


def _short_label(b: int) -> str:
    return "row 1 (you)" if b == 0 else f"row {b + 1}"


def _pct(accepted: int, drafted: int) -> str:
    return f"{accepted / drafted:.1%} ({accepted}/{drafted})" if drafted else "– (nothing drafted)"


def _finish(row: Trace) -> str:
    return FINISH.get(row.finish_reason, row.finish_reason)


def row_figures(row: Trace) -> str:
    """One row's figures in a line: tokens (how it ended), the per-draft acceptance rate, the mean acceptance
    length."""
    st = row.stats
    return (f"{st.new_tokens} tokens ({_finish(row)}) · {RATE_NAME} {_pct(st.accepted, st.drafted)} · "
            f"{LENGTH_NAME} {st.mean_tokens_per_iteration:.2f}")


# --- the rows, side by side ---------------------------------------------------------------------------------

def rows_html(trace: Trace | None) -> str:
    """Every row's tokens, coloured by fate, in a grid of boxes (side by side on a wide page, stacked on a phone;
    each box scrolls inside itself and takes the keyboard focus to do so). "" for a trace without a batch."""
    if trace is None or trace.batch is None:
        return ""
    greedy = is_greedy(trace)
    rows = trace.rows()
    boxes = []
    for b, row in enumerate(rows):
        label = row_label(b)
        request = row.prompt if len(row.prompt) <= REQUEST_CHARS else row.prompt[:REQUEST_CHARS - 1] + "…"
        stream = ("".join(iteration_html(it, False, greedy) for it in row.iterations)
                  or '<span class="sd-empty">no token yet</span>')
        cls = "sd-row sd-row-you" if b == 0 else "sd-row"
        boxes.append(f'<section class="{cls}" role="region" tabindex="0" aria-label="{esc(label)}">'
                     f"<h4>{esc(label)}</h4>"
                     f'<p class="sd-request" title="{esc(row.prompt)}">“{esc(request)}”</p>'
                     f'<p class="sd-row-figs">{esc(row_figures(row))}</p>'
                     f'<div class="sd-stream">{stream}</div></section>')
    head = (f'<p class="sd-batch-head"><strong>A batch of {len(rows)}</strong>: your request (row 1) and '
            f"{len(rows) - 1} other users' requests, decoded together — every iteration one draft pass and ONE "
            "target forward that verifies every row still running; each row keeps its own accepted tokens and "
            "leaves the batch when it ends.</p>")
    return (f'<div class="sd-tokens sd-batch-rows">{head}{legend_html(greedy)}'
            f'<div class="sd-batch-grid">{"".join(boxes)}</div></div>')


# --- the numbers -------------------------------------------------------------------------------------------

def rows_identical(trace: Trace) -> tuple[int, int] | None:
    """(rows whose text equals their baseline row's, rows with a baseline to compare), or None when no row has
    one."""
    return _counts([identical_to_baseline(row) for row in trace.rows()])


def _counts(same: list[bool | None]) -> tuple[int, int] | None:
    compared = [s for s in same if s is not None]
    return (sum(compared), len(compared)) if compared else None


def _all_same(counts: tuple[int, int] | None) -> str:
    return "–" if counts is None else ("yes" if counts[0] == counts[1] else "no")


def _identical_text(trace: Trace, counts: tuple[int, int] | None) -> str:
    if counts is None:
        return "– (no baseline in this run)"
    same, n = counts
    text = f"{_all_same(counts)} ({same} of {n} rows)"
    if is_greedy(trace):
        return text
    if trace.config.get("sampler") == "coupled":
        return text + " (coupled sampler: each row is its target-only sample for its seed)"
    return text + " (sampling: each row and its baseline row are samples of the same distribution, not copies)"


def pooled_speedup_text(trace: Trace, short: bool = False) -> str:
    """The pooled measured speedup over the batched baseline (every row's tokens ÷ each run's wall time; ``short``:
    the number alone), or why there is none yet."""
    st, base = trace.batch.stats, trace.batch.baseline
    if base is not None and st.speedup > 0:
        return f"×{st.speedup:.2f}" + ("" if short else f" ({st.tokens_per_s:.1f} tokens/s against the batched "
                                                        f"baseline's {base.tokens_per_s:.1f}: every row's tokens ÷ "
                                                        "each run's wall time)")
    if base is not None:
        return "– (the batched baseline is running…)"
    return "– (no baseline in this run)"


COLUMNS = "<colgroup>" + "".join(f'<col style="width:{w}%">' for w in (19, 17, 24, 21, 19)) + "</colgroup>"


def _soft(name: str) -> str:
    """A header that may break inside its long word on a phone ("accept-ance")."""
    return name.replace("acceptance", "accept&shy;ance")


def _yes_no(same: bool | None) -> str:
    return "–" if same is None else ("yes" if same else "no")


def batch_summary_html(trace: Trace | None) -> str:
    """Per row and pooled: tokens, the per-draft acceptance rate, the mean acceptance length, whether the row
    equals its baseline row; then the pooled measured speedup and whether every row equals its baseline row.
    "" for a trace without a batch."""
    if trace is None or trace.batch is None:
        return ""
    st, cfg = trace.batch.stats, trace.config
    same = [identical_to_baseline(row) for row in trace.rows()]
    counts = _counts(same)
    body = "".join(f'<tr><th scope="row">{esc(_short_label(b))}</th><td>{row.stats.new_tokens}</td>'
                   f"<td>{esc(_pct(row.stats.accepted, row.stats.drafted))}</td>"
                   f"<td>{row.stats.mean_tokens_per_iteration:.2f}</td><td>{_yes_no(same[b])}</td></tr>"
                   for b, row in enumerate(trace.rows()))
    body += (f'<tr class="sd-pooled"><th scope="row">pooled</th><td>{st.new_tokens}</td>'
             f"<td>{esc(_pct(st.accepted, st.drafted))}</td><td>{st.mean_acceptance_length:.2f}</td>"
             f"<td>{_all_same(counts)}</td></tr>")
    label = (f"Batch of {trace.batch.size} · target {esc(cfg.get('target', '?'))} · draft "
             f"{esc(cfg.get('draft', cfg.get('drafter', '?')))} · K={esc(cfg.get('k'))} · {st.iterations} batch "
             f"iterations (one target verify each) · measured on {esc(cfg.get('device', '?'))} in "
             f"{esc(cfg.get('dtype', '?'))}")
    head = ('<tr><th scope="col">row</th><th scope="col">tokens</th>'
            f'<th scope="col">{_soft(RATE_NAME)}</th><th scope="col">{_soft(LENGTH_NAME)}</th>'
            '<th scope="col">= its base&shy;line row</th></tr>')
    return (f'<div class="sd-summary sd-batch-summary"><p class="sd-label">{label}</p>'
            f"<table>{COLUMNS}<thead>{head}</thead><tbody>{body}</tbody></table>"
            f"<p><strong>pooled measured speedup over the batched baseline</strong>: "
            f"{esc(pooled_speedup_text(trace))}</p>"
            f"<p><strong>every row's text equals its baseline row</strong>: "
            f"{esc(_identical_text(trace, counts))}</p>"
            f'<p class="sd-note">The {RATE_NAME} is {RATE_MEANS}; the {LENGTH_NAME} is the {LENGTH_MEANS} (a row '
            "that drafts nothing still makes 1.00). Pooled: every row's drafts, and every row's tokens ÷ every "
            "row's iterations.</p></div>")


def batch_summary_line(trace: Trace) -> str:
    """A batched run in one line of plain text (for /generate and logs): the pooled figures under both names,
    the speedup and agreement with the baseline, each row's two acceptance figures, what ran where."""
    st, cfg = trace.batch.stats, trace.config
    parts = [f"batch of {trace.batch.size}: {st.new_tokens} new tokens in {st.iterations} batch iterations "
             "(one target verify each)",
             f"pooled {RATE_NAME} {_pct(st.accepted, st.drafted)}",
             f"pooled {LENGTH_NAME} {st.mean_acceptance_length:.2f} tokens per target forward",
             f"{st.tokens_per_s:.1f} tokens/s"]
    if trace.batch.baseline is not None:
        parts += [f"batched baseline {trace.batch.baseline.tokens_per_s:.1f} tokens/s",
                  f"pooled measured speedup: {pooled_speedup_text(trace, short=True)}",
                  f"every row identical to its baseline row: {_identical_text(trace, rows_identical(trace))}"]
    rows = "; ".join(f"{_short_label(b)}: {RATE_NAME} {_pct(r.stats.accepted, r.stats.drafted)}, {LENGTH_NAME} "
                     f"{r.stats.mean_tokens_per_iteration:.2f}" for b, r in enumerate(trace.rows()))
    parts += [f"per row: {rows}",
              f"target {cfg.get('target', '?')} ← draft {cfg.get('draft', cfg.get('drafter', '?'))}, K={cfg.get('k')}"
              f" ({cfg.get('k_policy') or 'fixed'} K policy), temperature {cfg.get('temperature')}, "
              f"{cfg.get('device', '?')} {cfg.get('dtype', '?')}"]
    return " · ".join(parts)


# --- the figures -------------------------------------------------------------------------------------------

LANE_DRAFT = "batch · draft"
LANE_VERIFY = "batch · verify"
LANE_BASELINE = "batched baseline"
NO_BATCH = "This run decoded one sequence: set the batch size above 1 to see a batch's forwards here."


def batch_timeline_figure(trace: Trace | None) -> go.Figure:
    """Top: each batch iteration's draft steps (over every active row), its ONE verify forward (every active row's
    last token and drafts) and its host time, on the run's clock, with the batched baseline's steps in a lane
    beneath (its own clock, from 0). Bottom: the rows still in the batch and the K asked of them, per iteration."""
    title = "The batch's forwards: its draft steps and ONE verify per iteration"
    if trace is None or trace.batch is None:
        return empty_figure(title, NO_BATCH)
    batch = trace.batch
    if not batch.forwards:
        return empty_figure(title, "The batch's first iteration is on its way.")
    draft, verify, other = ([], [], []), ([], [], []), ([], [], [])     # (widths, bases, hover)

    def add(lane: tuple, ms: float, base: float, hover: str) -> None:
        lane[0].append(ms)
        lane[1].append(base)
        lane[2].append(hover)
    for f in batch.forwards:
        n, t = len(f.rows), f.t_start_ms
        rows = ", ".join(str(r + 1) for r in f.rows)
        for j, ms in enumerate(f.draft_ms):
            add(draft, ms, t, f"iteration {f.index + 1} · draft step {j + 1}/{len(f.draft_ms)} over {n} rows: "
                              f"{ms:.1f} ms")
            t += ms
        why = f"<br>K policy: {html.escape(f.k_reason, quote=False)}" if f.k_reason else ""
        add(verify, f.verify_ms, t, f"iteration {f.index + 1} · ONE verify forward for rows {rows} ({n} active), "
                                    f"K = {f.k}, {f.fed} tokens fed: {f.verify_ms:.1f} ms{why}")
        t += f.verify_ms
        add(other, f.other_ms, t, f"iteration {f.index + 1} · each row's verdicts, records and cache rollback: "
                                  f"{f.other_ms:.1f} ms")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.66, 0.34], vertical_spacing=0.1)
    if batch.stats.prefill_ms > 0:
        fig.add_trace(hbar("prefill (every row's prompt)", LANE_VERIFY, [batch.stats.prefill_ms], [0.0],
                            [f"every row's prompt in one forward: {batch.stats.prefill_ms:.1f} ms"], pal.PREFILL),
                      row=1, col=1)
    fig.add_trace(hbar("draft step", LANE_DRAFT, *draft, pal.DRAFT), row=1, col=1)
    fig.add_trace(hbar("verify forward", LANE_VERIFY, *verify, pal.TARGET), row=1, col=1)
    fig.add_trace(hbar("host time", LANE_VERIFY, *other, pal.OTHER), row=1, col=1)
    lanes = [LANE_DRAFT, LANE_VERIFY]
    base = batch.baseline
    if base is not None and base.step_ms:
        starts = [0.0] + list(accumulate(base.step_ms))[:-1]
        hover = [f"baseline step {i + 1}: one forward, one token for every row still running: {ms:.1f} ms"
                 + (" (with the prefill)" if i == 0 else "") for i, ms in enumerate(base.step_ms)]
        fig.add_trace(hbar("baseline step", LANE_BASELINE, list(base.step_ms), starts, hover, pal.BASELINE),
                      row=1, col=1)
        lanes.append(LANE_BASELINE)
    xs = [f.t_start_ms for f in batch.forwards]
    last = batch.forwards[-1]
    end = last.t_start_ms + sum(last.draft_ms) + last.verify_ms + last.other_ms    # the rows' line runs to the end
    fig.add_trace(go.Scatter(name="rows in the batch", x=[*xs, end], y=[len(f.rows) for f in (*batch.forwards, last)],
                             mode="lines",
                             line={"shape": "hv", "color": pal.ACCEPTED, "width": 3},
                             hovertemplate="from %{x:.0f} ms: %{y} rows<extra></extra>"), row=2, col=1)
    fig.add_trace(go.Scatter(name="K asked of each row", x=xs, y=[f.k for f in batch.forwards], mode="markers",
                             marker={"symbol": "diamond", "size": 8, "color": pal.DRAFT,
                                     "line": {"color": "#333", "width": 1}},
                             hovertemplate="iteration at %{x:.0f} ms: K = %{y}<extra></extra>"), row=2, col=1)
    apply_layout(fig, title, height=480, barmode="overlay", bargap=0.35)
    fig.update_yaxes(categoryorder="array", categoryarray=lanes, autorange="reversed", showgrid=False, row=1, col=1)
    top = max(batch.size, *(f.k for f in batch.forwards))
    fig.update_yaxes(title_text="rows · K", range=[-0.5, top + 0.5], dtick=max(1, top // 4), row=2, col=1)
    fig.update_xaxes(title_text="ms since each run started", row=2, col=1)
    return fig


def batch_acceptance_figure(trace: Trace | None) -> go.Figure:
    """Each row's and the pooled per-draft acceptance rate (accepted ÷ drafted, with its Wilson 95 % interval),
    and each row's and the pooled mean acceptance length (tokens per target forward)."""
    title = "Acceptance, each row and pooled"
    if trace is None or trace.batch is None:
        return empty_figure(title, NO_BATCH)
    rows, st = trace.rows(), trace.batch.stats
    if not st.row_iterations:
        return empty_figure(title, "The batch's first iteration is on its way.")
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.22, subplot_titles=(RATE_NAME, LENGTH_NAME))
    names = [_short_label(b) for b in range(len(rows))]
    counts = [(r.stats.accepted, r.stats.drafted) for r in rows]

    def rate_bar(name: str, x: list[str], pairs: list[tuple[int, int]], color: str, pattern: str) -> go.Bar:
        rates = [a / d if d else None for a, d in pairs]
        cis = [wilson(a, d) if d else (0.0, 0.0) for a, d in pairs]
        return go.Bar(name=name, x=x, y=rates, marker={"color": color, "pattern": {"shape": pattern}},
                      error_y={"type": "data", "symmetric": False,
                               "array": [hi - r if r is not None else 0 for r, (_, hi) in zip(rates, cis)],
                               "arrayminus": [r - lo if r is not None else 0 for r, (lo, _) in zip(rates, cis)]},
                      hovertext=[f"{n}: {_pct(a, d)} accepted of drafted; 95 % CI {100 * lo:.0f}–{100 * hi:.0f} %"
                                 if d else f"{n}: nothing drafted" for n, (a, d), (lo, hi) in zip(x, pairs, cis)],
                      hoverinfo="text")
    fig.add_trace(rate_bar("each row", names, counts, pal.ACCEPTED, ""), row=1, col=1)
    fig.add_trace(rate_bar("all rows (pooled)", ["pooled"], [(st.accepted, st.drafted)], pal.TARGET, "/"),
                  row=1, col=1)
    lengths = [r.stats.mean_tokens_per_iteration for r in rows]
    fig.add_trace(go.Bar(name="each row", x=names, y=lengths, marker={"color": pal.ACCEPTED}, showlegend=False,
                         hovertext=[f"{n}: {r.stats.new_tokens} tokens in {r.stats.iterations} target forwards = "
                                    f"{v:.2f} per forward" for n, r, v in zip(names, rows, lengths)],
                         hoverinfo="text"), row=2, col=1)
    fig.add_trace(go.Bar(name="all rows (pooled)", x=["pooled"], y=[st.mean_acceptance_length], showlegend=False,
                         marker={"color": pal.TARGET, "pattern": {"shape": "/"}},
                         hovertext=[f"pooled: {st.new_tokens} tokens in {st.row_iterations} row-forwards = "
                                    f"{st.mean_acceptance_length:.2f} per forward"], hoverinfo="text"), row=2, col=1)
    apply_layout(fig, title, height=520, bargap=0.3)
    fig.update_yaxes(title_text=RATE_MEANS, range=[0, 1.05], tickformat=".0%", row=1, col=1)
    fig.update_yaxes(title_text="tokens ÷ target forwards", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(categoryorder="array", categoryarray=[*names, "pooled"])
    return fig


__all__ = ["rows_html", "batch_summary_html", "batch_summary_line", "batch_timeline_figure",
           "batch_acceptance_figure", "row_label", "row_figures", "rows_identical", "pooled_speedup_text", "CSS",
           "RATE_NAME", "LENGTH_NAME"]
