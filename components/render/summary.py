"""The summary panel: what this run measured, side by side with its baseline, labelled with device
and dtype. Only recorded numbers and ratios of them; nothing estimated."""
from __future__ import annotations

import html

from specdec_core import Trace
from specdec_core.stats.intervals import acceptance_interval, speedup_interval
from specdec_core.stats.intervals import verdict as speedup_verdict

from components.render.measures import identical_to_baseline

FINISH = {"eos": "end of sequence", "length": "max new tokens reached", "stopped": "stopped by you", "limit": "stopped at the run limit", "": "running…"}


def esc(x: object) -> str:
    """Text as HTML text or an attribute value (quotes escaped)."""
    return html.escape(str(x), quote=True)


def summary_rows(trace: Trace) -> list[tuple[str, str, str]]:
    """(what, speculative, baseline) rows, as plain text (escaped later)."""
    st, b, cfg = trace.stats, trace.baseline, trace.config
    rows = [
        ("new tokens", f"{st.new_tokens} ({FINISH.get(trace.finish_reason, trace.finish_reason)})",
         str(len(b.new_token_ids)) if b else "–"),
        ("iterations", str(st.iterations), "–"),
        ("acceptance rate", f"{st.acceptance_rate:.1%} ({st.accepted}/{st.drafted} drafted; {acceptance_ci(trace)})",
         "–"),
        ("tokens / iteration", f"{st.mean_tokens_per_iteration:.2f}", "1.00" if b else "–"),
        ("target forwards", str(st.target_forwards), str(b.target_forwards) if b else "–"),
        ("draft forwards", str(st.draft_forwards), "–"),
        ("wall time", f"{st.wall_ms:.0f} ms", f"{b.wall_ms:.0f} ms" if b else "–"),
        ("tokens / s", f"{st.tokens_per_s:.1f}", f"{b.tokens_per_s:.1f}" if b else "–"),
    ]
    s = speedup_interval(trace)
    rows.append(("measured speedup", speedup_verdict(s) if s is not None
                 else "– (needs a baseline)", ""))
    same = identical_to_baseline(trace)
    greedy = cfg.get("temperature", 0) == 0
    if same is None:
        verdict = "– (no baseline in this run)"
    elif greedy:
        verdict = "yes" if same else "no"
    elif cfg.get("sampler") == "coupled":
        verdict = ("yes (coupled sampler: the target-only sample for this seed, whatever the draft)" if same else
                   "no (the coupled sampler keeps the sample: only a float16/bfloat16 forward's last bits differ)")
    else:
        verdict = ("yes" if same else "no") + " (sampling: both are samples of the same distribution, not copies)"
    rows.append(("identical to baseline", verdict, ""))
    return rows


def acceptance_ci(trace: Trace) -> str:
    """"95 % CI 38.4–61.6 %" (Wilson) of the run's acceptance rate."""
    lo, hi = acceptance_interval(trace)
    return f"95 % CI {100 * lo:.1f}–{100 * hi:.1f} %"


# text for screen readers only (the table's corner header, which the eye reads from the rows' names), styled inline
# so that the standalone replay page needs no stylesheet of the app's
SR_ONLY = ('<span style="position:absolute;width:1px;height:1px;margin:-1px;padding:0;overflow:hidden;'
           'clip:rect(0,0,0,0);white-space:nowrap;border:0">{}</span>')


def summary_html(trace: Trace | None) -> str:
    """The summary as an HTML table (all values escaped), or a hint before the first run."""
    if trace is None or not trace.iterations:
        return '<div class="sd-summary"><em>The measured summary appears here after a run.</em></div>'
    cfg = trace.config
    body = "".join(f'<tr><th scope="row">{esc(a)}</th><td>{esc(b)}</td><td>{esc(c)}</td></tr>'
                   for a, b, c in summary_rows(trace))
    device, dtype = cfg.get("device", "?"), cfg.get("dtype", "?")
    label = (f"target {esc(cfg.get('target', '?'))} · draft {esc(cfg.get('draft', cfg.get('drafter', '?')))} · "
             f"K={esc(cfg.get('k'))}{esc(_policy_note(cfg, ' ({} K policy, K is the cap)'))} · "
             f"temperature {esc(cfg.get('temperature'))}"
             + (" · coupled sampler (drafter-invariant)" if cfg.get("sampler") == "coupled" else "")
             + f" · measured on {esc(device)} in {esc(dtype)}"
             + (f" · row 1 (your request) of a batch of {trace.batch.size}" if trace.batch is not None else ""))
    notes = []
    if str(dtype) in ("float16", "bfloat16"):
        notes.append(f"In {esc(dtype)} a K-token verify forward and a 1-token forward can differ in the last bits, "
                     "so greedy output may drift from the baseline; float32 matches token for token.")
    if trace.baseline is None:
        notes.append("Tick “measure a baseline in the same run” for the speedup.")
    note_html = "".join(f'<p class="sd-note">{n}</p>' for n in notes)
    return (f'<div class="sd-summary"><p class="sd-label">{label}</p>'
            f'<table><thead><tr><th scope="col">{SR_ONLY.format("measure")}</th><th scope="col">speculative</th>'
            '<th scope="col">baseline (target only)</th></tr></thead>'
            f"<tbody>{body}</tbody></table>{note_html}</div>")


def _policy_note(cfg: dict, fmt: str) -> str:
    """``fmt`` filled with the K policy when it is not fixed ("heuristic" for old traces with adaptive_k),
    then the confidence stop when it is on and the draft is a model (prompt lookup has no confidence to stop on)."""
    policy = cfg.get("k_policy") or ("heuristic" if cfg.get("adaptive_k") else "fixed")
    stop = cfg.get("confidence_stop")
    on = (isinstance(stop, (int, float)) and not isinstance(stop, bool) and stop > 0   # an uploaded trace may hold
          and cfg.get("drafter") != "ngram")                                          # anything
    return ("" if policy == "fixed" else fmt.format(policy)) + (f", confidence stop {stop:g}" if on else "")


def summary_line(trace: Trace) -> str:
    """The run in one line of plain text (for the API and logs): tokens, iterations, acceptance, speed,
    the measured speedup and baseline agreement when there is a baseline, and what ran where."""
    st, b, cfg = trace.stats, trace.baseline, trace.config
    k = f"K={cfg.get('k')}{_policy_note(cfg, ' {}')}"
    parts = [f"{st.new_tokens} new tokens in {st.iterations} iterations "
             f"({FINISH.get(trace.finish_reason, trace.finish_reason) or 'unfinished'})",
             f"acceptance {st.acceptance_rate:.1%} ({st.accepted}/{st.drafted}, {acceptance_ci(trace)})",
             f"{st.mean_tokens_per_iteration:.2f} tokens/iteration", f"{st.tokens_per_s:.1f} tokens/s"]
    if b is not None:
        parts.append(f"baseline {b.tokens_per_s:.1f} tokens/s")
        s = speedup_interval(trace)
        if s is not None:
            parts.append(f"measured speedup: {speedup_verdict(s)}")
        same = identical_to_baseline(trace)
        if same is not None:
            parts.append(f"identical to baseline: {'yes' if same else 'no'}")
    parts.append(f"target {cfg.get('target', '?')} ← draft {cfg.get('draft', cfg.get('drafter', '?'))}, {k}, "
                 f"temperature {cfg.get('temperature')}, {cfg.get('device', '?')} {cfg.get('dtype', '?')}")
    return " · ".join(parts)
