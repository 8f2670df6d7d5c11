"""Presenter mode and the keyboard: for running the demo live, on a projector, without the mouse.

- ``KEYBOARD_JS`` (passed to ``launch(js=...)``) listens for ← / → (previous / next iteration), Home / End
  (first / last) and Space (play / pause) and clicks those buttons of the viewer on screen (Live, Replay
  or Simulator; on the Learn tab ← / → are Back / Next chapter), unless the focus is in a field that takes
  keys (text, number, dropdown, checkbox), Space is pressing a focused button (or tab, checkbox, …), or the
  arrows are moving within a focused tab list, radio group or menu. It never touches Tab: focus moves through
  the page as the browser orders it (tests/test_browser_a11y.py walks it on Live and Learn).
- Presenter mode (the ``#presenter`` toggle, or ``?presenter=1`` in the URL) puts the class
  ``sd-presenter`` on the page: tokens at 28 px, bigger summary and hints (``PRESENTER_CSS``); every figure laid
  out again by Plotly itself at projector sizes, figure text 18 px, titles 22 px (``figures_js.FIGURES_JS``, so
  that legends, titles and axis titles make room for the larger text rather than overlap or get cut); it folds the settings accordions away (those registered in
  ``AppContext.fold_in_presenter``). The colours are already the Okabe-Ito colour-blind-safe palette.

``presenter_from_url`` and ``presenter_fold`` are thin handlers the tests call directly.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gradio as gr

PRESENTER_TOKEN_PX = 28
# The figures are not styled here: CSS on the drawn SVG text would enlarge it after Plotly has laid the figure out
# (overlapping legends, cut titles); pages/figures_js.py has Plotly lay them out at presenter sizes instead.
# !important: gradio also adds a copy of every rule scoped under its container (more specific than a
# selector on body), so the presenter rules must win by importance.
PRESENTER_CSS = f"""
.sd-keys-hint, .sd-keys-hint p {{ font-size: 13px; color: #444; margin: 0; }}
body.sd-presenter .sd-tokens {{ font-size: {PRESENTER_TOKEN_PX}px !important; line-height: 1.9 !important; }}
body.sd-presenter .sd-legend {{ font-size: 20px !important; }}
body.sd-presenter .sd-idx {{ font-size: 15px !important; }}
body.sd-presenter .sd-summary table {{ font-size: 20px !important; }}
body.sd-presenter .sd-summary .sd-label, body.sd-presenter .sd-summary .sd-note {{ font-size: 17px !important; }}
body.sd-presenter .sd-status {{ font-size: 19px !important; }}
body.sd-presenter .sd-keys-hint, body.sd-presenter .sd-keys-hint p {{ font-size: 17px !important; }}
"""

# Runs once when the page loads (gradio's launch(js=...)): the keyboard, and the page class that the
# presenter toggle's own js sets. Buttons are found by elem_id; the first visible viewer wins.
KEYBOARD_JS = """
() => {
  const PREFIXES = ["", "replay-", "sim-", "learn-"];
  const ACTIONS = {ArrowLeft: "prev", ArrowRight: "next", Home: "first", End: "last", " ": "play"};
  const shown = (el) => el !== null && el.offsetParent !== null;
  const takesKeys = (el) => {
    if (!el || el === document.body) return false;
    if (el.isContentEditable) return true;
    const tag = el.tagName;
    if (tag === "TEXTAREA" || tag === "SELECT") return true;
    // a range slider steps the viewer (its keys are the viewer's), except a Learn guess, which is a field
    return tag === "INPUT" && ((el.type || "text").toLowerCase() !== "range" || el.closest(".learn-guess") !== null);
  };
  // keys a focused control handles itself: Space presses a focused button (or ticks a box, opens a tab); the
  // arrows move within a tab list, radio group, list box or menu. Those never reach the viewer.
  const PRESSABLE = "button, a[href], summary, [role=button], [role=tab], [role=checkbox], [role=switch], " +
                    "[role=menuitem], [role=option], [role=radio]";
  const GROUPS = "[role=tablist], [role=radiogroup], [role=listbox], [role=menu], [role=menubar], [role=tree]";
  const ownKey = (el, key) => el && el !== document.body && el.closest &&
    ((key === " " && el.closest(PRESSABLE) !== null) || (key !== " " && el.closest(GROUPS) !== null));
  document.addEventListener("keydown", (e) => {
    const action = ACTIONS[e.key];
    if (!action || e.ctrlKey || e.metaKey || e.altKey || takesKeys(e.target) || ownKey(e.target, e.key)) return;
    for (const prefix of PREFIXES) {
      const button = document.getElementById(prefix + action);
      if (shown(button)) {
        e.preventDefault();
        e.stopPropagation();
        if (!button.disabled) button.click();
        return;
      }
    }
  }, true);
  window.sdSetPresenter = (on) => document.body.classList.toggle("sd-presenter", Boolean(on));
  if (new URLSearchParams(window.location.search).get("presenter") === "1") window.sdSetPresenter(true);
}
"""

TOGGLE_JS = "(on) => { if (window.sdSetPresenter) window.sdSetPresenter(on); return on; }"


def presenter_from_url(request: gr.Request) -> Any:
    """On page load: ``?presenter=1`` switches the toggle on (its change event then folds the settings)."""
    params = getattr(request, "query_params", None) or {}
    return gr.Checkbox(value=True) if str(params.get("presenter", "")) in ("1", "true", "yes") else gr.skip()


def presenter_fold(on: bool, n_accordions: int) -> tuple:
    """Presenter mode on: every registered settings accordion folds; off: they open again."""
    return tuple(gr.Accordion(open=not on) for _ in range(n_accordions))


def build_presenter_toggle() -> gr.Checkbox:
    return gr.Checkbox(value=False, label="presenter mode", elem_id="presenter",
                       info="large type, settings folded (or open the page with ?presenter=1)")


def wire_presenter(demo: gr.Blocks, toggle: gr.Checkbox, accordions: Sequence[gr.Accordion]) -> None:
    """The toggle sets the page class (client side) and folds ``accordions``; the URL parameter sets the toggle."""
    n = len(accordions)

    def fold(on: bool) -> Any:
        updates = presenter_fold(on, n)
        return updates[0] if n == 1 else updates      # gradio wants a bare value for a single output
    toggle.change(fold, [toggle], list(accordions), js=TOGGLE_JS, show_progress="hidden", queue=False)
    demo.load(presenter_from_url, None, [toggle], show_progress="hidden", queue=False)


__all__ = ["KEYBOARD_JS", "PRESENTER_CSS", "PRESENTER_TOKEN_PX", "build_presenter_toggle", "wire_presenter",
           "presenter_from_url", "presenter_fold"]
