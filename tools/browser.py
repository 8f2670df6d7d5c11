"""The headless-browser set-up shared by the browser tests and ``tools.screenshots``: Debian's chromium
(``/usr/bin/chromium``, from apt, see ``scripts/install-chromium.sh``) driven through the PyPI ``playwright``
package, never ``playwright install``; the Live run as a viewer starts it (click Run, wait for Done and its
figures); and a Learn chapter's run and reveal."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update"]
VIEWPORT = {"width": 1400, "height": 1000}
# true when the Live tab's status line holds the word (``pg.wait_for_function(STATUS_JS, arg=word)``)
STATUS_JS = "(word) => (document.querySelector('#status') || {}).innerText?.includes(word) || false"
FIGURES = ("plot-timeline", "plot-race", "plot-outcomes", "plot-pq", "plot-residual", "plot-positions", "plot-theory")


def chromium_missing() -> str | None:
    """Why no browser can be started here, or None when it can."""
    if not os.path.exists(CHROMIUM):
        return (f"{CHROMIUM} is absent and could not be installed (make browser-deps needs root or sudo: "
                "apt-get install chromium)")
    return None


@contextmanager
def browser() -> Iterator[Any]:
    """A headless chromium (playwright ``Browser``), closed on exit."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def open_page(b: Any, url: str, tab: str | None = "Live", **context: Any) -> Any:
    """A new page on ``url`` once the app is drawn (its first tab, Learn, shows its title), on the tab named
    ``tab`` (the Live tab by default: then once its Run button shows; None: the tab the URL opens)."""
    pg = b.new_page(**{"viewport": dict(VIEWPORT), **context})
    pg.set_default_timeout(30_000)
    pg.goto(url)
    pg.wait_for_selector("#learn-title", state="attached")
    if tab is not None:
        show_tab(pg, tab)
    return pg


def show_tab(pg: Any, name: str) -> None:
    """Open the tab labelled ``name``; for Live, wait until its Run button shows."""
    pg.get_by_role("tab", name=name, exact=True).click()
    if name == "Live":
        pg.wait_for_selector("#run")


def set_number(pg: Any, elem_id: str, value: int) -> None:
    box = pg.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def plot_traces(pg: Any, elem_id: str) -> int:
    """How many traces the figure in ``#elem_id`` holds (-1 when it has none drawn)."""
    return pg.evaluate(f"() => {{ const d = document.querySelector('#{elem_id} .js-plotly-plot');"
                       " return d && d.data ? d.data.length : -1; }")


def plot_title(pg: Any, elem_id: str) -> str:
    return pg.evaluate(f"() => {{ const d = document.querySelector('#{elem_id} .js-plotly-plot');"
                       " return d && d.layout && d.layout.title ? String(d.layout.title.text || '') : ''; }")


def run_live(pg: Any, prompt: str | None = None, max_new: int | None = None) -> float:
    """Run Live on the page (with the given prompt and max new tokens, else the page's defaults) and wait
    until the status says Done and every figure is drawn. Returns the seconds until the first token showed."""
    show_tab(pg, "Live")     # a page shared by several tests may be on another tab
    if prompt is not None:
        pg.fill("#prompt textarea", prompt)
    if max_new is not None:
        set_number(pg, "max-new", max_new)
    after_a_run = pg.evaluate(STATUS_JS, "Done")
    t0 = time.time()
    pg.click("#run")
    if after_a_run:        # the last run's status and tokens are still shown until this run's first update
        pg.wait_for_function(f"() => !({STATUS_JS})('Done')", timeout=90_000, polling=50)
    # tokens stream in while the run is going: the first ones appear before the baseline is done
    pg.wait_for_selector("#tokens .sd-stream .sd-tok", timeout=90_000)
    first_token_s = time.time() - t0
    pg.wait_for_function(STATUS_JS, arg="Done", timeout=150_000)
    for fid in FIGURES:
        pg.wait_for_selector(f"#{fid} .js-plotly-plot")
    wait_for_figures(pg)
    return first_token_s


def wait_for_figures(pg: Any) -> None:
    """Until the page has drawn every figure it was given (it draws one at a time, ``figures_js``)."""
    pg.wait_for_function("() => window.sdFiguresDrawn ? window.sdFiguresDrawn() : true", timeout=60_000)


def presenter_replay_at(pg: Any, url: str, iteration: int) -> None:
    """Open ``url`` in presenter mode (``?presenter=1``: the body class set, the toggle on, the Live settings
    folded), go to the Replay tab's example and step to ``iteration`` with the keyboard, each step drawn
    before the next key."""
    pg.goto(url + "?presenter=1")
    pg.wait_for_selector("#learn-title")
    pg.wait_for_function("() => document.body.classList.contains('sd-presenter')")
    pg.wait_for_function("() => document.querySelector('#presenter input')?.checked === true")
    show_tab(pg, "Live")     # tabs are drawn when first shown: the Live settings exist once Live has been
    pg.wait_for_function("() => !document.querySelector('#live-settings .label-wrap').classList.contains('open')")
    pg.get_by_role("tab", name="Replay").click()
    pg.wait_for_selector("#replay-tokens .sd-stream .sd-tok")
    pg.wait_for_selector("#replay-plot-pq .main-svg text")
    wait_for_figures(pg)                           # the example's first figures all drawn before a key steps it
    pg.click("#replay-note")                       # focus outside any field
    pg.keyboard.press("Home")
    wait_for_anatomy(pg, 1)      # a step still on its way would move the slider back after the next key
    for i in range(2, iteration + 1):
        pg.keyboard.press("ArrowRight")
        wait_for_anatomy(pg, i)
        pg.wait_for_function(f"() => document.querySelector('#replay-iteration input[type=range]').value === '{i}'")


def wait_for_anatomy(pg: Any, iteration: int) -> None:
    """Until the Replay tab's anatomy figure (drawn last for a step) shows ``iteration``: "Anatomy of iteration
    N — step …", or just "Anatomy of iteration N" for one that drafted nothing."""
    pg.wait_for_function(f"() => /^Anatomy of iteration {iteration}( —|$)/.test("
                         "document.querySelector('#replay-plot-anatomy .js-plotly-plot')?.layout?.title?.text || '')",
                         timeout=60_000)


# The Learn tab: the chapter on screen (playwright's selector, and the same in the page's JavaScript).
LEARN_SHOWN = ".learn-chapter:visible"
LEARN_CHAPTER_JS = "[...document.querySelectorAll('.learn-chapter')].find(c => c.offsetParent !== null)"
LEARN_PLOTS_JS = f"[...({LEARN_CHAPTER_JS})?.querySelectorAll('.learn-plot .js-plotly-plot') ?? []]"


def learn_part(pg: Any, cls: str) -> Any:
    """The element of class ``cls`` (learn-run, learn-guess, learn-answer, …) in the chapter on screen."""
    return pg.locator(f"{LEARN_SHOWN} .{cls}").first


def learn_run(pg: Any, timeout_s: float = 90) -> None:
    """Press the chapter's Run; wait until one of its figures holds data and its note is written."""
    learn_part(pg, "learn-run").click()
    pg.wait_for_function(f"() => {LEARN_PLOTS_JS}.some(d => d.data && d.data.length > 0)", timeout=timeout_s * 1000)
    pg.wait_for_function(f"() => ({LEARN_CHAPTER_JS})?.querySelector('.learn-note')?.innerText.trim()",
                         timeout=timeout_s * 1000)
    wait_for_figures(pg)


def learn_guess(pg: Any, choice: int | None = None, number: float | None = None) -> None:
    """Commit a guess in the chapter on screen: the ``choice``-th option (from 0; -1 the last) of a choice guess, or
    ``number`` typed into a number guess (then Enter, as a person commits it)."""
    if choice is not None:
        labels = learn_part(pg, "learn-guess").locator("label")
        labels.nth(choice if choice >= 0 else labels.count() + choice).click()
    else:
        box = learn_part(pg, "learn-guess").locator("input[type=number]")
        box.fill(f"{number:g}")
        box.press("Enter")


def learn_reveal(pg: Any, timeout_s: float = 120) -> str:
    """Press the chapter's Reveal (with the guess as set); the answer once it shows."""
    learn_part(pg, "learn-reveal").click()
    pg.wait_for_function(f"() => ({LEARN_CHAPTER_JS})?.querySelector('.learn-answer')?.innerText.includes('This run')",
                         timeout=timeout_s * 1000)
    wait_for_figures(pg)
    return learn_part(pg, "learn-answer").inner_text()


# Every visible Plotly figure on the page (or under ``root``): what a projector would show wrong. For each figure
# (named by the id of its nearest element with one): legend entries whose boxes overlap, a legend over the title,
# an axis title or an axis's tick labels, and the title, axis titles, tick labels, annotations or legend reaching
# outside the figure's SVG (cut). Boxes are the browser's layout boxes of the drawn SVG text; 1 px of tolerance.
FIGURE_PROBLEMS_JS = """
(root) => {
  const box = (el) => { const r = el.getBoundingClientRect(); return {l: r.left, t: r.top, r: r.right, b: r.bottom}; };
  const overlap = (a, b) => Math.min(a.r, b.r) - Math.max(a.l, b.l) > 1 && Math.min(a.b, b.b) - Math.max(a.t, b.t) > 1;
  const inside = (a, o) => a.l >= o.l - 1 && a.t >= o.t - 1 && a.r <= o.r + 1 && a.b <= o.b + 1;
  const shown = (el) => el.textContent.trim() !== "" && el.getBoundingClientRect().width > 0;
  const say = (el) => `"${el.textContent.trim().slice(0, 50)}"`;
  const out = [];
  for (const gd of (root || document).querySelectorAll(".js-plotly-plot")) {
    if (gd.offsetParent === null || !gd._fullLayout) continue;
    const name = gd.closest("[id]")?.id || "?";
    const svg = box(gd.querySelector(".main-svg"));
    const problems = [];
    const title = [...gd.querySelectorAll(".g-gtitle text.gtitle")].filter(shown);
    const axisTitles = [...gd.querySelectorAll(".infolayer g[class*='title'] text")]
      .filter((t) => shown(t) && !t.classList.contains("gtitle") && !t.closest(".legend"));
    const ticks = [...gd.querySelectorAll(".main-svg g[class$='tick'] > text, .main-svg g[class$='tick2'] > text")].filter(shown);
    const notes = [...gd.querySelectorAll(".main-svg .annotation-text")].filter(shown);
    for (const [what, els] of [["title", title], ["axis title", axisTitles], ["tick label", ticks], ["annotation", notes]]) {
      for (const el of els) if (!inside(box(el), svg)) problems.push(`${what} cut: ${say(el)}`);
    }
    const entries = [...gd.querySelectorAll(".legend .traces")].filter((e) => e.getBoundingClientRect().width > 0);
    for (let i = 0; i < entries.length; i++) for (let j = i + 1; j < entries.length; j++) {
      if (overlap(box(entries[i]), box(entries[j]))) problems.push(`legend entries overlap: ${say(entries[i])} / ${say(entries[j])}`);
    }
    const bg = gd.querySelector(".legend .bg");
    if (bg && entries.length) {
      const lb = box(bg);
      for (const t of title) if (overlap(lb, box(t))) problems.push(`the legend covers the title ${say(t)}`);
      for (const t of axisTitles) if (overlap(lb, box(t))) problems.push(`the legend covers the axis title ${say(t)}`);
      for (const t of ticks) if (overlap(lb, box(t))) problems.push(`the legend covers the tick label ${say(t)}`);
      if (!inside(lb, svg)) problems.push("the legend is cut");
    }
    out.push({figure: name, title: title.map((t) => t.textContent).join(" "), legend_entries: entries.length, problems});
  }
  return out;
}
"""


def figure_problems(pg: Any, root: str | None = None) -> list[dict]:
    """``FIGURE_PROBLEMS_JS`` on the page (or under the element ``root`` selects): one dict per visible figure,
    ``{"figure", "title", "legend_entries", "problems": [...]}``."""
    return pg.evaluate(f"(sel) => ({FIGURE_PROBLEMS_JS})(sel ? document.querySelector(sel) : null)", root)


def axe_violations(pg: Any, impacts: tuple[str, ...] = ("critical", "serious")) -> list[dict]:
    """axe-core (the copy bundled in the PyPI package ``axe-playwright-python``, no network) on the page as it
    is: the violations of the given impacts, each ``{"id", "impact", "nodes": n, "targets": [...], "help"}``.
    First the page settles: no output still marked pending by gradio (drawn at 20 % opacity, which axe would
    measure as low contrast), and its fade back in done."""
    from axe_playwright_python.sync_playwright import Axe
    pg.wait_for_function("() => document.querySelectorAll('.pending').length === 0", timeout=60_000)
    pg.wait_for_timeout(800)
    found = Axe().run(pg).response["violations"]
    return [{"id": v["id"], "impact": v["impact"], "nodes": len(v["nodes"]), "help": v["help"],
             "targets": [" ".join(map(str, n["target"])) for n in v["nodes"]][:8]}
            for v in found if v["impact"] in impacts]


def figure_labels(pg: Any) -> list[tuple[str, str, str]]:
    """(id of the nearest element with one, role, aria-label) of every visible Plotly figure."""
    return [tuple(x) for x in pg.evaluate(
        "() => [...document.querySelectorAll('.js-plotly-plot')].filter(g => g.offsetParent !== null)"
        ".map(g => [g.closest('[id]')?.id || '?', g.getAttribute('role') || '', g.getAttribute('aria-label') || ''])")]


def figure_font_sizes(pg: Any) -> dict[str, float]:
    """The base font size (px) Plotly laid each visible figure out with, by the id of its nearest element."""
    return pg.evaluate("() => Object.fromEntries([...document.querySelectorAll('.js-plotly-plot')]"
                       ".filter(g => g.offsetParent !== null && g._fullLayout)"
                       ".map(g => [g.closest('[id]')?.id || '?', g._fullLayout.font.size]))")


def tab_walk(pg: Any, presses: int) -> list[str]:
    """Press Tab ``presses`` times from the top of the page; what had the focus after each press (its id, else the
    id of its nearest element with one, with its tag and label)."""
    pg.evaluate("() => { document.activeElement?.blur(); window.scrollTo(0, 0); }")
    pg.mouse.click(2, 2)                   # the page's top corner: where the browser's Tab order starts from
    seen = []
    for _ in range(presses):
        pg.keyboard.press("Tab")
        seen.append(pg.evaluate(
            "() => { const e = document.activeElement; if (!e || e === document.body) return 'body';"
            " const host = e.id ? e : e.closest('[id]');"
            " return `${host ? '#' + host.id : '?'} ${e.tagName.toLowerCase()}"
            "${e.type ? '[' + e.type + ']' : ''} "
            "${(e.getAttribute('aria-label') || e.innerText || e.closest('label')?.innerText || e.value || '')"
            ".trim().slice(0, 30)}`; }"))
    return seen


# A class (components/pages/classroom): the presenter's panel on the Learn tab and the students' page.
CLASS_HISTOGRAM_JS = """
() => {
  const gd = document.querySelector('#class-histogram.js-plotly-plot, #class-histogram .js-plotly-plot');
  if (!gd || !gd.data || gd.offsetParent === null) return null;
  const bars = gd.data.filter((t) => t.type === 'bar');
  return {title: String(gd.layout?.title?.text || ''), guesses: bars.reduce((n, t) => n + t.y.reduce((a, b) => a + b, 0), 0),
          measured: gd.data.some((t) => t.name === 'measured') || /measured/.test(String(gd.layout?.title?.text || ''))};
}
"""


def class_start(pg: Any) -> str:
    """On a presenter page (presenter mode, Learn tab): Start a class; the code as shown ("XXXX-XXXX")."""
    import re
    pg.click("#class-start")
    pg.wait_for_function("() => /Class code/.test(document.querySelector('#class-code')?.innerText || '')")
    return re.search(r"[A-Z0-9]{4}-[A-Z0-9]{4}", pg.inner_text("#class-code")).group(0)


def class_join(b: Any, url: str, code: str | None, viewport: dict | None = None) -> Any:
    """A student's page in a browser context of its own: ``url`` + ``?class=CODE`` (``code`` None: ``url`` as it
    is), once it has joined (its status names the class) or said why not."""
    pg = b.new_page(viewport=dict(viewport or VIEWPORT))
    pg.set_default_timeout(30_000)
    pg.goto(url if code is None else f"{url}?class={code}")
    pg.wait_for_function("() => /Class |no class|not a class code|Type the class code|full|nickname|removed/.test("
                         "document.querySelector('#class-status')?.innerText || '')")
    return pg


def class_status(pg: Any, pattern: str, timeout_s: float = 30) -> str:
    """Wait until the page's class status line (a student's; ``#class-lead-status`` is the presenter's) matches the
    regular expression ``pattern``; its text."""
    pg.wait_for_function("(p) => new RegExp(p).test(document.querySelector('#class-status')?.innerText || '')",
                         arg=pattern, timeout=timeout_s * 1000)
    return pg.inner_text("#class-status")


def class_histogram(pg: Any, timeout_s: float = 60) -> dict:
    """The class's histogram once a Reveal has drawn it on the page (before, a student's page shows a placeholder
    without bars): {"title", "guesses" (the bars' total), "measured"}."""
    pg.wait_for_function(f"() => /guesses:/.test(({CLASS_HISTOGRAM_JS})()?.title || '')", timeout=timeout_s * 1000)
    return pg.evaluate(f"() => ({CLASS_HISTOGRAM_JS})()")
