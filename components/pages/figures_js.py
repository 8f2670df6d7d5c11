"""What the page does to every Plotly figure gradio draws (the render builders stay pure; this runs in the browser).

Gradio's Plot component draws a figure with ``Plotly.react(div, data, layout, config)`` on the one ``window.Plotly``
(plotly.js, loaded with the first plot). ``FIGURES_JS`` wraps that ``react`` once it exists, so that every figure,
the ones on the page now and every one drawn later, on any tab:

- **is drawn without freezing the page**: one figure per browser task, with the newest figure it was given (an
  update that arrives while the page is still drawing replaces the one waiting for the same plot). A click or a
  key (Stop, a tab) is handled between two figures, and a device that draws slower than a run streams shows fewer
  frames instead of falling ever further behind.
- **presenter mode** (the body class ``sd-presenter``, ``presenter.py``): is laid out by Plotly itself at projector
  sizes: every font size in the layout and the traces ×``FONT_SCALE`` (13 px → 18 px, titles 16 → 22 px), the
  fixed margins ×``FONT_SCALE``, the height ×``HEIGHT_SCALE``; the figures' own automargins and container-anchored
  legends (``render.base``) then make room, so nothing overlaps and nothing is cut. Switching the mode on or off
  lays every drawn figure out again from the layout it was given (kept on the div as ``__sdLayout``).
- **a text alternative**: the plot's div gets ``role="figure"`` and an ``aria-label`` made from what the figure
  says: "Chart: <title>. <subtitle>. <notes>. Legend: <series>. Horizontal axis: <x title>. Vertical axis: <y
  title>." (``describe``; notes are the figure's short annotations, which carry its key numbers: "measured speedup
  ×1.42", "✓ accepted", …), and its drawn SVG is hidden from assistive technology (``aria-hidden``), so a screen
  reader announces the figure once, by that line, instead of reading out its tick labels. Plotly's toolbar keeps
  its labelled buttons, which is why the role is "figure", not "img" (an image has no interactive parts; axe's
  ``nested-interactive``); of them only "Download plot as a PNG" stays in the Tab order (the others are pointer
  tools, zoom, pan, select, that work by dragging), and the toolbar shows while it has the focus
  (``theme.A11Y_CSS``).
"""
from __future__ import annotations

FONT_SCALE = 1.4          # 13 px figure text → 18 px, 16 px titles → 22 px
HEIGHT_SCALE = 1.3        # the plot keeps its share of a taller figure
ALT_MAX_CHARS = 420       # a text alternative is one line, not the data

FIGURES_JS = """
() => {
  const FONT = __FONT__, HEIGHT = __HEIGHT__, ALT_MAX = __ALT__;
  const presenting = () => document.body.classList.contains("sd-presenter");
  const clone = (x) => (x === undefined ? x : JSON.parse(JSON.stringify(x)));
  const scaleFont = (f) => { if (f && typeof f === "object" && typeof f.size === "number") f.size = Math.round(f.size * FONT * 10) / 10; };
  const FONT_KEYS = ["font", "tickfont", "textfont", "insidetextfont", "outsidetextfont", "titlefont"];
  // every font size anywhere in a layout or a trace (titles, legends, axes, annotations, colorbars, hover labels)
  const scaleFonts = (node) => {
    if (Array.isArray(node)) { node.forEach(scaleFonts); return; }
    if (!node || typeof node !== "object") return;
    if (node.pad && typeof node.pad === "object") {          // a title's padding grows with its text
      for (const side of ["t", "b", "l", "r"]) if (typeof node.pad[side] === "number") node.pad[side] *= FONT;
    }
    for (const [k, v] of Object.entries(node)) {
      if (k === "template") continue;
      if (FONT_KEYS.includes(k)) scaleFont(v);
      if (v && typeof v === "object") scaleFonts(v);
    }
  };
  const present = (data, layout) => {
    if (!presenting()) return [data, layout];
    const d = clone(data) || [], l = clone(layout) || {};
    scaleFonts(d);
    scaleFonts(l);
    l.font = l.font || {};
    if (typeof l.font.size !== "number") l.font.size = Math.round(12 * FONT);
    if (typeof l.height === "number") l.height = Math.round(l.height * HEIGHT);
    if (l.margin) for (const side of ["l", "r", "t", "b"]) {
      if (typeof l.margin[side] === "number") l.margin[side] = Math.round(l.margin[side] * FONT);
    }
    for (const [k, ax] of Object.entries(l)) {
      if (/^[xy]axis[0-9]*$/.test(k) && ax && ax.title && typeof ax.title.standoff === "number") ax.title.standoff *= FONT;
    }
    return [d, l];
  };
  // titles (and centred messages) wrapped at word boundaries to the figure's width, at the size they are drawn;
  // a break falls only between words outside any tag, a <sup> subtitle's lines stay <sup> (drawn at 70 %)
  const canvas = document.createElement("canvas").getContext("2d");
  const plain = (html) => { const el = document.createElement("div"); el.innerHTML = html; return el.textContent; };
  const widthOf = (html, px, family) => { canvas.font = `${px}px ${family}`; return canvas.measureText(plain(html)).width; };
  const words = (html) => {
    const out = [];
    let cur = "", depth = 0;
    for (const part of html.split(/(<[^>]*>)/)) {
      if (part.startsWith("<")) {
        if (/^<\//.test(part)) depth = Math.max(0, depth - 1);
        else if (!/\/>$/.test(part)) depth += 1;
        cur += part;
        continue;
      }
      const bits = part.split(" ");
      bits.forEach((bit, i) => {
        if (i > 0 && depth === 0) { if (cur) out.push(cur); cur = ""; }
        else if (i > 0) cur += " ";
        cur += bit;
      });
    }
    if (cur) out.push(cur);
    return out;
  };
  const wrapLine = (html, px, family, avail) => {
    if (widthOf(html, px, family) <= avail) return [html];
    const lines = [];
    let cur = "";
    for (const w of words(html)) {
      const next = cur ? cur + " " + w : w;
      if (cur && widthOf(next, px, family) > avail) { lines.push(cur); cur = w; } else cur = next;
    }
    if (cur) lines.push(cur);
    return lines;
  };
  const wrapText = (html, px, family, avail) => {
    const out = [];
    let inSup = false;
    for (let line of String(html).split(/<br\s*\/?>/i)) {
      let sup = inSup;
      if (/^<sup>/i.test(line)) { sup = true; line = line.slice(5); }
      const closes = /<\/sup>$/i.test(line);
      if (closes) line = line.slice(0, -6);
      inSup = sup && !closes;
      for (const piece of wrapLine(line, sup ? px * 0.7 : px, family, avail)) out.push(sup ? `<sup>${piece}</sup>` : piece);
    }
    return out.join("<br>");
  };
  const fit = (layout, width) => {
    if (!width || !layout) return layout;
    const family = (layout.font && layout.font.family) || "sans-serif";
    const base = (layout.font && layout.font.size) || 12;
    const t = layout.title;
    if (t && typeof t === "object" && t.text) {
      const px = (t.font && t.font.size) || base * 1.2;
      const x = typeof t.x === "number" && t.xref !== "paper" ? t.x : 0;
      t.text = wrapText(t.text, px, family, width * (1 - x) - 16);
    }
    for (const [k, ax] of Object.entries(layout)) {        // axis titles, to their axis's length
      if (!/^[xy]axis[0-9]*$/.test(k) || !ax || !ax.title || typeof ax.title !== "object" || !ax.title.text) continue;
      const dom = Array.isArray(ax.domain) ? ax.domain : [0, 1];
      const span = k[0] === "x" ? width - 60 : (layout.height || 400) * 0.6;
      const px = (ax.title.font && ax.title.font.size) || base;
      ax.title.text = wrapText(ax.title.text, px, family, Math.max(80, (dom[1] - dom[0]) * span));
    }
    for (const a of layout.annotations || []) {           // a centred message (an empty figure's)
      if (a.showarrow === false && a.xref === "paper" && a.x === 0.5 && typeof a.text === "string") {
        a.text = wrapText(a.text, (a.font && a.font.size) || base, family, width * 0.9 - 20);
      }
    }
    return layout;
  };
  const text = (html) => {
    const el = document.createElement("div");
    el.innerHTML = String(html || "").replace(/<br\\s*\\/?>/gi, ". ");
    return el.textContent.replace(/\\s+/g, " ").replace(/(\\. )+/g, ". ").trim();
  };
  const titleOf = (t) => text(t && typeof t === "object" ? t.text : t);
  const describe = (gd) => {
    const l = gd.__sdLayout || gd.layout || {};     // as the builder wrote it, before any wrapping
    const parts = [];
    const title = titleOf(l.title);
    const sub = l.title && l.title.subtitle ? titleOf(l.title.subtitle) : "";
    parts.push("Chart: " + (title || "untitled") + (sub ? ". " + sub : ""));
    // short annotations carry the key numbers; a figure with no data says why in its (longer) message
    const empty = !(gd.__sdData || gd.data || []).length;
    const notes = (l.annotations || []).map((a) => text(a.text)).filter((t) => t && (empty || t.length <= 80));
    if (notes.length) parts.push([...new Set(notes)].slice(0, 6).join("; "));
    const names = (gd.data || []).filter((t) => t.showlegend !== false && t.name && t.visible !== false)
      .map((t) => text(t.name));
    if (names.length && l.showlegend !== false) parts.push("Legend: " + [...new Set(names)].join(", "));
    const axes = (prefix, label) => Object.keys(l).filter((k) => k.startsWith(prefix + "axis"))
      .map((k) => titleOf(l[k] && l[k].title)).filter(Boolean);
    const xs = axes("x"), ys = axes("y");
    if (xs.length) parts.push("Horizontal axis: " + [...new Set(xs)].join("; "));
    if (ys.length) parts.push("Vertical axis: " + [...new Set(ys)].join("; "));
    let line = parts.join(". ").replace(/\\.\\./g, ".");
    if (line.length > ALT_MAX) line = line.slice(0, ALT_MAX - 1) + "…";
    return line + (line.endsWith(".") || line.endsWith("…") ? "" : ".");
  };
  const label = (gd) => {
    try {
      gd.setAttribute("role", "figure");
      gd.setAttribute("aria-label", describe(gd));
      for (const svg of gd.querySelectorAll(".main-svg")) svg.setAttribute("aria-hidden", "true");
      // the toolbar's pointer tools (zoom, pan, select…) work by dragging: out of the Tab order, so that a
      // keyboard walks one stop per figure, its PNG download (the toolbar shows while it has the focus, A11Y_CSS)
      for (const b of gd.querySelectorAll(".modebar-btn")) {
        if (!/download/i.test(b.getAttribute("data-title") || "")) b.setAttribute("tabindex", "-1");
      }
    } catch (e) { /* a figure without a layout yet */ }
  };
  // One figure drawn per task, each with the newest figure it was given: an update that arrives while the page
  // is still drawing replaces the one waiting for the same div, and a click or a key is handled between two
  // figures. A device that draws slower than a run streams shows fewer frames, never a frozen page.
  const waiting = new Set();
  let pumping = false;
  const pump = () => {
    const div = waiting.values().next().value;
    if (div === undefined) { pumping = false; return; }
    waiting.delete(div);
    try { if (div.isConnected) draw(div); } catch (e) { console.error(e); }
    setTimeout(pump, 0);
  };
  let react = null;
  const draw = (div) => {
    const [d, presented] = present(div.__sdData, div.__sdLayout);
    const width = div.clientWidth || (div.__sdLayout && div.__sdLayout.width);
    const l = fit(presented === div.__sdLayout ? clone(presented) : presented, width);
    div.__sdPresented = presenting();
    Promise.resolve(react.call(window.Plotly, div, d, l, div.__sdConfig)).then(() => label(div), () => {});
  };
  const hook = (Plotly) => {
    if (!Plotly || Plotly.__sdHooked || typeof Plotly.react !== "function") return;
    react = Plotly.react;
    Plotly.__sdHooked = true;
    Plotly.react = function (gd, data, layout, config) {
      const div = typeof gd === "string" ? document.getElementById(gd) : gd;
      if (!div || (data !== undefined && !Array.isArray(data) && typeof data === "object")) {
        return react.apply(this, arguments);      // the react({data, layout}) form: not gradio's
      }
      div.__sdData = data; div.__sdLayout = clone(layout); div.__sdConfig = config;
      waiting.add(div);
      if (!pumping) { pumping = true; setTimeout(pump, 0); }
      return Promise.resolve(div);
    };
    // gradio resizes right after each react: a figure still waiting is drawn at its container's size anyway
    if (Plotly.Plots && typeof Plotly.Plots.resize === "function") {
      const resize = Plotly.Plots.resize;
      Plotly.Plots.resize = function (gd) {
        const div = typeof gd === "string" ? document.getElementById(gd) : gd;
        return waiting.has(div) ? Promise.resolve(div) : resize.apply(this, arguments);
      };
    }
    // figures drawn before the hook: lay them out again (presenter mode) and label them
    for (const gd of document.querySelectorAll(".js-plotly-plot")) relayout(gd, true);
  };
  const relayout = (gd, always) => {
    if (!window.Plotly || !gd.data) return;
    if (!gd.__sdLayout) { gd.__sdData = gd.data; gd.__sdLayout = clone(gd.layout); }
    if (!always && gd.__sdPresented === presenting()) return;
    gd.__sdPresented = presenting();
    window.Plotly.react(gd, gd.__sdData, gd.__sdLayout, gd.__sdConfig);
  };
  if (window.Plotly) hook(window.Plotly);
  else {
    let value;
    Object.defineProperty(window, "Plotly", {
      configurable: true, enumerable: true,
      get: () => value,
      set: (v) => { value = v; hook(v); },
    });
  }
  // presenter mode switched: every drawn figure laid out again at the new sizes
  new MutationObserver(() => {
    for (const gd of document.querySelectorAll(".js-plotly-plot")) relayout(gd, false);
  }).observe(document.body, {attributes: true, attributeFilter: ["class"]});
  window.sdDescribeFigure = describe;
  window.sdFiguresDrawn = () => !pumping;     // no figure waiting to be drawn
}
""".replace("__FONT__", str(FONT_SCALE)).replace("__HEIGHT__", str(HEIGHT_SCALE)).replace("__ALT__", str(ALT_MAX_CHARS))


def page_js(*snippets: str) -> str:
    """Several ``() => {…}`` page scripts as the one function ``launch(js=…)`` takes, each run in turn (one
    failing does not stop the others)."""
    calls = "\n".join(f"  try {{ ({s.strip()})(); }} catch (e) {{ console.error(e); }}" for s in snippets)
    return "() => {\n" + calls + "\n}"


__all__ = ["FIGURES_JS", "FONT_SCALE", "HEIGHT_SCALE", "page_js"]
