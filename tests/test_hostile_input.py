"""Untrusted text never reaches the page as markup: hostile values in every field of an uploaded trace, refused or
shown, and the standalone replay built from such a trace. (URL parameters: tests/test_links.py.)"""
from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import gradio as gr
import pytest

from components.render.anatomy import anatomy_figure
from components.pages.export import export_replay_html
from components.render.replay_html import MAX_ITERATIONS, anatomy_figures, replay_html, script_json
from components.render.figures import all_figures
from components.serving.messages import page_error, page_text
from components.pages.replay import EXAMPLES_DIR, list_examples, replay_upload
from components.render.summary import summary_html
from components.render.tokens import tokens_html
from specdec_core import Trace

HOSTILE = '<img src="x"><a href="javascript:alert(1)">a</a><script>alert(1)</script>&amp;'
MARKUP = ("<img", "<a ", "<script", "</script")


def _examples() -> list[dict]:
    return [json.loads((EXAMPLES_DIR / ex.name).read_text(encoding="utf-8")) for ex in list_examples()]


def _smallest() -> dict:
    return min(_examples(), key=lambda d: len(json.dumps(d)))


def _leaves(value: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    else:
        yield path


def _set(d: Any, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        d = d[key]
    d[path[-1]] = value


def _get(d: Any, path: tuple) -> Any:
    for key in path:
        d = d[key]
    return d


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _no_markup(text: str, where: str) -> None:
    low = text.lower()
    assert not any(m in low for m in MARKUP), f"{where}: {text[:300]!r}"


def _small_leaves(d: dict) -> list[tuple]:
    """Every field at the top, in the config, stats, baseline and calibration, and in the first two iterations
    (the rest repeat their shapes)."""
    return [p for p in _leaves(d) if p[0] != "iterations" or p[1] < 2]


def test_page_text_escapes_markup_and_keeps_quotes():
    assert page_text('<img src="x"> & \'y\'') == '&lt;img src="x"&gt; &amp; \'y\''
    err = page_error(f"unknown value {HOSTILE!r}")
    assert isinstance(err, gr.Error)
    _no_markup(err.message, "gr.Error")


@pytest.mark.parametrize("bad", [HOSTILE, HOSTILE + "eos", '<img src="x">eos'])
def test_a_refused_finish_reason_is_quoted_as_text(tmp_path, bad):
    d = _examples()[0]
    d["finish_reason"] = bad
    path = tmp_path / "t.json"
    path.write_text(json.dumps(d), encoding="utf-8")
    with pytest.raises(gr.Error) as refused:
        replay_upload(str(path))
    assert "finish_reason" in refused.value.message and "&lt;img" in refused.value.message
    _no_markup(refused.value.message, "finish_reason")


def test_a_hostile_value_in_any_field_is_refused_as_text_or_shown_as_text(tmp_path):
    """Each field in turn replaced by a hostile string (and by it as an object key): the upload is refused with a
    message holding no markup, or accepted (and then shown without any, tested below)."""
    base = _smallest()
    accepted = []
    for i, path in enumerate(_small_leaves(base)):
        d = copy.deepcopy(base)
        old = _get(d, path)
        _set(d, path, HOSTILE + old if isinstance(old, str) else HOSTILE)
        file = tmp_path / f"{i}.json"
        file.write_text(json.dumps(d), encoding="utf-8")
        try:
            Trace.from_dict(d)
        except ValueError:
            with pytest.raises(gr.Error) as refused:
                replay_upload(str(file))
            _no_markup(refused.value.message, f"refusal at {path}")
            continue
        accepted.append(path)                   # shown: see test_every_view_of_a_hostile_trace_shows_its_text_as_text
    assert {p[0] for p in accepted} >= {"prompt", "text"}      # free text is accepted, shown as text
    for section in ("config", "calibration"):
        for key in (HOSTILE, '<img src=x>'):               # too long for a key (refused), and short enough
            d = copy.deepcopy(base)
            d.setdefault("calibration", {"verify_ms": [30.0, 31.0]})[section == "calibration" and key or "x"] = 1
            d[section][key] = HOSTILE
            file = tmp_path / "key.json"
            file.write_text(json.dumps(d), encoding="utf-8")
            try:
                out = replay_upload(str(file))
            except gr.Error as e:
                _no_markup(e.message, f"refused key in {section}")
                continue
            for value in (out[0], out[8], out[-1]):
                _no_markup(value.split("</style>")[-1], f"html with a key in {section}")


def _hostile_everywhere(d: dict) -> dict:
    """Every string field of the trace that takes free text made hostile (the result still validates)."""
    d = copy.deepcopy(d)
    for path in _leaves(d):
        value = _get(d, path)
        if isinstance(value, str) and path[-1] not in ("schema", "finish_reason") and path != ("config", "k_policy"):
            _set(d, path, HOSTILE + value)
    Trace.from_dict(d)
    return d


def _example(name: str) -> dict:
    return json.loads((EXAMPLES_DIR / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["ngram_extractive.json",                       # greedy, sampling
                                  pytest.param("sampling_t08.json", marks=pytest.mark.slow)])
def test_every_view_of_a_hostile_trace_shows_its_text_as_text(name):
    d = _hostile_everywhere(_example(name))
    d["config"]["k_policy"] = HOSTILE                         # an uploaded config may hold any short string
    trace = Trace.from_dict(d)
    for i in range(min(len(trace.iterations), 4)):
        for fig in (*all_figures(trace, i), anatomy_figure(trace, i)):
            for s in _strings(fig.to_plotly_json()):
                _no_markup(s, f"figure of iteration {i}")
        _no_markup(tokens_html(trace, i).split("</style>")[-1], "tokens")
    _no_markup(summary_html(trace), "summary")
    page = replay_html(trace)
    page = re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.S).replace('<a id="sd-download"', "")
    _no_markup(page, "standalone replay")


def test_script_json_cannot_close_its_script_element():
    value = {"t": "</script><!-- <script>&\u2028\u2029"}
    text = script_json(value)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == value


def test_the_standalone_replay_embeds_the_apps_own_anatomy_figures():
    trace = Trace.from_dict(_hostile_everywhere(_smallest()))
    figures, template = anatomy_figures(trace)
    assert len(figures) == len(trace.iterations) and template
    for i in (0, len(figures) - 1):
        own = json.loads(anatomy_figure(trace, i).to_json())
        own["layout"].pop("template")
        assert figures[i] == own
    page = replay_html(trace)
    assert page.count("</script>") == 6 and page.lower().count("<script") == 6
    assert "http://" not in page.split("<script>")[0] and "Content-Security-Policy" in page
    embedded = page.split('<script type="application/json" id="sd-trace">')[1].split("</script>")[0]
    assert json.loads(embedded) == trace.to_dict()


def test_export_refuses_what_it_cannot_replay(tmp_path):
    with pytest.raises(gr.Error, match="Nothing to export yet"):
        export_replay_html(None)
    d = _smallest()
    empty = {**d, "iterations": [], "new_token_ids": [], "stats": {**d["stats"], "new_tokens": 0, "iterations": 0}}
    with pytest.raises(gr.Error, match="no iterations"):
        export_replay_html(empty)
    with pytest.raises(ValueError, match=f"at most {MAX_ITERATIONS}"):
        trace = Trace.from_dict(d)
        trace.iterations = trace.iterations * (MAX_ITERATIONS // len(trace.iterations) + 1)
        replay_html(trace)
    out = export_replay_html(d, folder=str(tmp_path))
    assert out.visible and out.value["path"].endswith(".html") if isinstance(out.value, dict) else True
    files = list(tmp_path.glob("*.html"))
    assert len(files) == 1 and files[0].read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_every_toast_goes_through_the_escaping_helper():
    """gr.Error / gr.Warning / gr.Info render their message as HTML: the app builds them only in messages.py."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    offenders = []
    for path in [root / "app.py", *sorted((root / "components").rglob("*.py"))]:
        if path.name == "messages.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\bgr\.(Error|Warning|Info)\(|on_wait=gr\.", line):
                offenders.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert not offenders, "use components/messages.py (page_error, page_warning, page_info):\n" + "\n".join(offenders)
