// The students' page of a class: join by the code in the address (?class=CODE) or typed, follow the room through its
// event stream (server-sent events: the room's document on every change), guess and Send, see the class's answer.
// Every text a page shows from the server is HTML the server built and escaped; what the student types or sends is
// only ever put on the page as text.
(() => {
  "use strict";
  const base = window.location.pathname.replace(/\/class\/?$/, "/");
  const api = base + "class/api/";
  const IDS_KEY = "sd-class-ids";                      // {last: code, ids: {code: student id}}, 8 classes at most
  const ASK_CODE = "Type the class code your presenter shows (8 letters and digits), then Join.";
  const WAIT_RUN = "Your presenter runs this chapter: the run is drawn here.";
  const WAIT_REVEAL = "Drawn when your presenter reveals the answer.";
  const MARKS = {"right": "✓ right", "wrong": "✗ not this time", "can't tell": "? can’t tell from this run"};
  const $ = (id) => document.getElementById(id);
  const S = {code: null, shown: "", student: null, handle: null, room: null, figures: new Map(), events: null,
             offset: 0, control: "", touched: false, mine: null, joinGuess: undefined, tick: null, drawn: new Map()};

  // --- what the browser keeps ----------------------------------------------------------------------------------
  function kept() {
    try {
      const v = JSON.parse(window.localStorage.getItem(IDS_KEY) || "{}");
      return {last: typeof v.last === "string" ? v.last : null, ids: (v.ids && typeof v.ids === "object") ? v.ids : {}};
    } catch (e) { return {last: null, ids: {}}; }
  }
  function keep(code, student) {
    const k = kept();
    delete k.ids[code];
    k.ids[code] = student;
    const codes = Object.keys(k.ids).slice(-8);
    try {
      window.localStorage.setItem(IDS_KEY, JSON.stringify({last: code, ids: Object.fromEntries(codes.map((c) => [c, k.ids[c]]))}));
    } catch (e) { /* private mode: a reload joins as a new student */ }
  }

  // --- small helpers --------------------------------------------------------------------------------------------
  function status(text, kind) {
    const el = $("class-status");
    el.textContent = text;
    el.className = "sd-class-status sd-class-" + (kind || "wait");
  }
  function now() { return Date.now() + S.offset; }
  function fmt(x) {
    if (typeof x !== "number") return String(x);
    return String(Math.round(x * 100) / 100);
  }
  async function post(path, body) {
    try {
      const r = await fetch(api + path, {method: "POST", headers: {"Content-Type": "application/json"},
                                         body: JSON.stringify(body), cache: "no-store"});
      const data = await r.json().catch(() => ({error: "The server answered something unexpected: try again."}));
      return r.ok ? data : Object.assign({error: "Refused."}, data, {status: r.status});
    } catch (e) {
      return {error: "The class cannot be reached: check your connection, then try again.", status: 0};
    }
  }
  function showForm(message, kind, askNickname) {
    stop();
    $("class-chapter").hidden = true;
    $("class-live-run").hidden = true;
    $("class-timer").hidden = true;
    $("class-join-form").hidden = false;
    $("class-nick-in").hidden = $("class-nick-label").hidden = !askNickname;
    if (S.code && !$("class-code-in").value) $("class-code-in").value = S.shown || S.code;
    status(message, kind || "problem");
  }
  function stop() {
    if (S.events) S.events.close();
    S.events = null;
    if (S.tick) window.clearInterval(S.tick);
    S.tick = null;
  }

  // --- joining ---------------------------------------------------------------------------------------------------
  async function join(raw, nickname, quiet) {
    status("Joining the class…", "wait");
    const code = String(raw || "").replace(/[\s-]/g, "").toUpperCase();
    const k = kept();
    const body = {code: raw, student: k.ids[code] || null};
    if (nickname) body.nickname = nickname;
    const got = await post("join", body);
    if (got.error) {
      S.code = code;
      if (quiet && got.reason !== "nickname") showForm(ASK_CODE, "wait");     // the last class: ended since
      else showForm(got.error, "problem", got.reason === "nickname");
      return;
    }
    S.code = got.code; S.shown = got.shown; S.student = got.student; S.handle = got.handle;
    S.joinGuess = got.guess;                 // this student's guess on the room's current run (a reload)
    keep(got.code, got.student);
    $("class-join-form").hidden = true;
    status("Class " + got.shown + ": following your presenter…", "wait");
    follow();
  }

  function follow() {
    stop();
    const es = new EventSource(api + "events?code=" + encodeURIComponent(S.code));
    S.events = es;
    es.addEventListener("room", (e) => {
      const d = JSON.parse(e.data);
      S.offset = d.now - Date.now();
      for (const [id, fig] of Object.entries(d.figures || {})) S.figures.set(id, fig);
      render(d.room);
    });
    es.addEventListener("gone", () => showForm("There is no class " + S.shown + " any more: it has ended. " + ASK_CODE));
    es.addEventListener("problem", (e) => status(JSON.parse(e.data).error, "problem"));
    es.onerror = () => { if (S.events === es && es.readyState !== EventSource.CLOSED) status("Reconnecting to the class…", "wait"); };
  }

  // --- the page from the room's document ------------------------------------------------------------------------
  function render(room) {
    S.room = room;
    if (room.removed.includes(S.handle)) {
      stop();
      $("class-chapter").hidden = true;
      $("class-timer").hidden = true;
      status("Your presenter removed you from this class.", "problem");
      return;
    }
    $("class-chapter").hidden = false;
    $("learn-title").textContent = room.of ? `Chapter ${room.chapter} / ${room.of} · ${room.title}` : "A class";
    document.title = room.title ? `${room.title} · a class` : "A class";
    $("class-text").innerHTML = room.text;
    const run = room.run, rev = room.reveal;
    $("class-setting").hidden = !(run && run.setting);
    $("class-setting").textContent = run && run.setting ? run.setting : "";
    $("class-note").innerHTML = run ? run.note : '<div class="sd-learn-note"><p>Waiting for your presenter to run this chapter.</p></div>';
    $("class-tokens").hidden = !(run && run.tokens);
    $("class-tokens").innerHTML = run && run.tokens ? run.tokens : "";
    const fig = (i) => (rev && rev.figures[i]) || (run && run.figures[i]) || null;
    draw("class-plot1", fig(0), room.title, run ? WAIT_REVEAL : WAIT_RUN);
    draw("class-plot2", fig(1), room.title, run ? WAIT_REVEAL : WAIT_RUN);
    draw("class-histogram", rev ? rev.histogram : null, "The class's guesses", "The class's guesses are drawn here when your presenter reveals the answer.");
    control(room);
    answer(room);
    live(room);
    timer();
    phaseLine();
    const used = new Set([...(run ? run.figures : []), ...(rev ? [...rev.figures, rev.histogram] : []), room.live && room.live.figure]);
    for (const id of [...S.figures.keys()]) if (!used.has(id)) S.figures.delete(id);
  }

  function phaseLine(said) {
    const room = S.room;
    if (!room) return;
    const where = `Class ${S.shown} · chapter ${room.chapter}: `;
    const sent = S.mine !== null ? ` Your guess: ${fmt(S.mine)} (sent).` : "";
    const open = room.phase === "open" && !(room.deadline && now() >= room.deadline * 1000);
    $("class-send").disabled = !open;
    if (said) { status(said[0], said[1]); return; }
    if (room.phase === "waiting") status(where + "wait for your presenter's run, then guess here.", "wait");
    else if (open) status(where + (S.mine === null ? "guess, then Send." : "guessing is open." + sent +
                                   " You can change it until your presenter locks guesses."), "ok");
    else if (room.phase === "revealed") status(where + "the answer is out." + (sent || " You sent no guess this time."), "ok");
    else status(where + "guesses are locked." + (sent || " You sent no guess this time."), "wait");
  }

  // the guess control: set up afresh for every run (a guess starts nowhere), kept as it is otherwise
  function control(room) {
    const key = room.guess ? `${room.chapter}:${room.run_no}` : "";
    if (key === S.control) return;
    S.control = key;
    S.touched = false;
    S.mine = null;
    if (S.joinGuess !== undefined) {        // the guess this student sent before a reload
      S.mine = S.joinGuess; S.joinGuess = undefined;
    }
    const box = $("class-guess-control");
    box.textContent = "";
    const g = room.guess;
    $("class-guess-form").hidden = !g;
    if (!g) return;
    $("class-guess-label").textContent = "your guess: " + g.label;
    if (g.choices.length) {
      g.choices.forEach((c, i) => {
        const row = document.createElement("label");
        row.className = "sd-class-choice";
        const input = document.createElement("input");
        Object.assign(input, {type: "radio", name: "class-choice", value: c, id: "class-choice-" + i});
        input.checked = S.mine === c;
        input.addEventListener("change", () => { S.touched = true; });
        row.append(input, document.createTextNode(c));
        box.append(row);
      });
    } else {
      const row = document.createElement("div");
      row.className = "sd-class-slider";
      const range = document.createElement("input");
      const num = document.createElement("input");
      for (const el of [range, num]) Object.assign(el, {min: g.min, max: g.max, step: g.step});
      range.type = "range"; num.type = "number"; num.inputMode = "decimal";
      range.setAttribute("aria-label", "your guess (slider)");
      num.setAttribute("aria-label", "your guess (number)");
      range.value = num.value = S.mine !== null ? S.mine : g.min;
      range.addEventListener("input", () => { num.value = range.value; S.touched = true; });
      num.addEventListener("input", () => { range.value = num.value; S.touched = true; });
      row.append(range, num);
      box.append(row);
    }
    S.touched = S.mine !== null;
  }

  function guessValue() {
    const g = S.room.guess;
    if (g.choices.length) {
      const picked = document.querySelector("input[name=class-choice]:checked");
      return picked ? picked.value : null;
    }
    const v = Number(document.querySelector("#class-guess-control input[type=number]").value);
    return Number.isFinite(v) ? v : null;
  }

  async function send(e) {
    e.preventDefault();
    const room = S.room;
    if (!room || !room.guess) return;
    const value = guessValue();
    if (!S.touched || value === null) {
      phaseLine(["Not sent: move the slider (or pick an answer) to your guess first.", "problem"]);
      return;
    }
    $("class-send").disabled = true;
    const got = await post("guess", {code: S.code, student: S.student, chapter: room.chapter, run_no: room.run_no, value});
    if (got.error) {
      phaseLine(["Not sent: " + got.error, "problem"]);
      if (got.status === 404) showForm(got.error);
      return;
    }
    S.mine = got.guess;
    phaseLine([got.said, "ok"]);
  }

  // after a Reveal: this student's own line (built here, as text), then the class's answer (the server's HTML)
  function answer(room) {
    const out = $("class-answer");
    const rev = room.reveal;
    if (!rev) { out.textContent = ""; return; }
    const t = rev.truth;
    const line = document.createElement("p");
    line.className = "sd-class-mine";
    const band = (typeof t.low === "number" && typeof t.high === "number") ? ` [${fmt(t.low)}–${fmt(t.high)}]` : "";
    const measured = `measured ${t.label}${band}`;
    const middle = rev.median === null ? "" : (room.guess && room.guess.choices.length ?
      ` · most of the class: ${rev.median}` : ` · class median ${fmt(rev.median)}`);
    if (S.mine === null) {
      line.textContent = `You sent no guess · ${measured}${middle}`;
    } else {
      const hit = rev.verdicts.find(([v]) => v === S.mine || (typeof v === "number" && Math.abs(v - S.mine) < 1e-9));
      const mark = hit && MARKS[hit[1]] ? ` — ${MARKS[hit[1]]}` : "";
      line.textContent = `You said ${fmt(S.mine)} · ${measured}${middle}${mark}`;
    }
    out.textContent = "";
    out.append(line);
    out.insertAdjacentHTML("beforeend", rev.summary);
  }

  function live(room) {
    const section = $("class-live-run");
    section.hidden = !room.live;
    if (!room.live) return;
    $("class-live-html").innerHTML = room.live.html;
    draw("class-live-plot", room.live.figure, "Live run", "");
  }

  // the guess timer: every page counts down to the same end (the server's clock, offset to this one's)
  function timer() {
    const el = $("class-timer");
    if (S.tick) window.clearInterval(S.tick);
    S.tick = null;
    const room = S.room;
    if (!room || !room.deadline || room.phase !== "open") { el.hidden = true; return; }
    const show = () => {
      const left = Math.max(0, Math.ceil(room.deadline - now() / 1000));
      el.hidden = false;
      if (left > 0) {
        el.className = "sd-class-timer";
        el.textContent = `⏱ ${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")} left to guess`;
      } else {
        el.className = "sd-class-timer sd-class-over";
        el.textContent = "⏱ Time is up: guesses are locked.";
        window.clearInterval(S.tick);
        S.tick = null;
        phaseLine();
      }
    };
    show();
    if (room.deadline * 1000 > now()) S.tick = window.setInterval(show, 250);
  }

  // --- figures: Plotly, laid out again for the screen they are on ------------------------------------------------
  function placeholder(title, message) {
    return {data: [], layout: {title: {text: title}, xaxis: {visible: false}, yaxis: {visible: false}, height: 220,
            annotations: [{text: message, x: 0.5, y: 0.5, xref: "paper", yref: "paper", showarrow: false}]}};
  }
  function wrap(text, width, size) {
    const per = Math.max(16, Math.floor((width - 24) / (size * 0.56)));
    return String(text || "").split("<br>").map((line) => {
      const plain = line.replace(/<[^>]+>/g, "");
      if (plain.length <= per) return plain;
      const out = [];
      let cur = "";
      for (const w of plain.split(" ")) {
        if (cur && (cur + " " + w).length > per) { out.push(cur); cur = w; } else cur = cur ? cur + " " + w : w;
      }
      if (cur) out.push(cur);
      return out.join("<br>");
    }).join("<br>");
  }
  function atLeast(obj, min) {           // every font size in a layout at least ``min`` px
    if (!obj || typeof obj !== "object") return;
    for (const [k, v] of Object.entries(obj)) {
      if ((k === "font" || k.endsWith("font")) && v && typeof v === "object") v.size = Math.max(min, v.size || min);
      else if (typeof v === "object") atLeast(v, min);
    }
  }
  // the house layout places the title above the plot and the legend below it, each making room for itself: keep
  // that, and set the width, the sizes (at least 12 px everywhere) and the title's lines for this screen
  function fit(fig, width, shown) {
    const L = JSON.parse(JSON.stringify(fig.layout || {}));
    const size = width < 640 ? 13 : 15;
    delete L.width;
    L.autosize = true;
    L.font = Object.assign({}, L.font, {size});
    if (width < 640) L.height = Math.max(300, Math.min(L.height || 380, 460));
    const title = typeof L.title === "string" ? {text: L.title} : Object.assign({}, L.title);
    if (title.text) {
      title.text = wrap(title.text, shown, size + 2);        // a subtitle's <sup> (70 %) would fall under 12 px
      title.font = Object.assign({}, title.font, {size: size + 2});
      L.title = title;
    }
    for (const ax of Object.keys(L).filter((k) => /^[xy]axis\d*$/.test(k))) {
      const t = L[ax] && L[ax].title;
      if (t && typeof t === "object" && t.text) t.text = String(t.text).replace(/<\/?su[pb]>/g, "");
    }
    if (width < 640) {
      for (const a of L.annotations || []) if (a.text) a.text = wrap(String(a.text).replace(/<br>/g, " "), width, size);
    }
    atLeast(L, 12);
    L.uniformtext = {minsize: 12, mode: "hide"};
    return L;
  }
  function draw(id, figId, title, waiting) {
    const el = $(id);
    const text = figId ? S.figures.get(figId) : null;
    const key = (figId || "none:" + waiting) + "@" + el.parentElement.clientWidth;
    if (S.drawn.get(id) === key) return;
    const fig = text || placeholder(title, waiting);
    const label = String((fig.layout && fig.layout.title && (fig.layout.title.text || fig.layout.title)) || title)
      .replace(/<[^>]+>/g, " ").replace(/\s+/g, " ").trim();
    el.setAttribute("role", "img");
    el.setAttribute("aria-label", "Figure: " + label);
    if (!window.Plotly) { S.drawn.delete(id); return; }   // drawn once plotly.js has arrived
    S.drawn.set(id, key);
    // a grid of text (an iteration's anatomy: a cell shape per step and draft) cannot be squeezed: it keeps 720 px
    // and scrolls in its own box
    const L = fig.layout || {};
    const dense = (L.shapes || []).length + (L.annotations || []).length > 8;
    const wide = dense && el.parentElement.clientWidth < 720;
    el.classList.toggle("sd-class-wide", wide);
    const box = el.parentElement;               // a box that scrolls takes the keyboard's focus (arrows scroll it)
    if (wide) {
      box.tabIndex = 0;
      box.setAttribute("role", "region");
      box.setAttribute("aria-label", "Figure: scroll sideways to see all of it");
    } else {
      box.removeAttribute("tabindex");
      box.removeAttribute("role");
      box.removeAttribute("aria-label");
    }
    const width = el.clientWidth || window.innerWidth;
    const phone = window.innerWidth < 640;           // a phone: no hover, no zoom; a touch scrolls the page
    const shown = Math.min(width, el.parentElement.clientWidth || width);
    window.Plotly.react(el, fig.data || [], fit(fig, width, shown), {responsive: true, displayModeBar: false,
                        staticPlot: phone, scrollZoom: false, doubleClick: false});
  }
  function redraw() { if (S.room) { S.drawn.clear(); render(S.room); } }

  // plotly.js (the copy the app ships with its plotly package) comes after the page works: the text, the guess and
  // Send do not wait for it
  function loadPlotly() {
    const s = document.createElement("script");
    s.src = "class/static/plotly.min.js";
    s.async = true;
    s.onload = redraw;
    document.head.append(s);
  }

  // --- start ------------------------------------------------------------------------------------------------------
  $("class-join-form").addEventListener("submit", (e) => {
    e.preventDefault();
    join($("class-code-in").value, $("class-nick-in").hidden ? "" : $("class-nick-in").value);
  });
  $("class-guess-form").addEventListener("submit", send);
  let resized = null;
  window.addEventListener("resize", () => { window.clearTimeout(resized); resized = window.setTimeout(redraw, 200); });
  loadPlotly();
  const fromLink = new URLSearchParams(window.location.search).get("class");
  if (fromLink) join(fromLink);
  else if (kept().last) join(kept().last, "", true);
  else showForm(ASK_CODE, "wait");
})();
