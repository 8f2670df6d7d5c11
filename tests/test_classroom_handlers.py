"""A class's pages without a browser: the presenter's and the students' handlers on an in-process room store, with
runs made of recorded values (no model): start, join, the run published once and drawn from the same JSON on every
page, polls that answer "nothing new" with gr.skip(), Send, the count, a Reveal judged for every guess, the class
following the presenter; a reload keeps the student and the presenter; wrong, expired and full rooms each say so in
one line; a page without the secret cannot lead, and nothing a student is sent holds it."""
from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import gradio as gr
import pytest

from components.pages.classroom import lead as ld
from components.pages.classroom import student as st
from components.pages.classroom.publish import check_guess, class_chapter, reveal_for_class, shown_run
from components.pages.learn import basics
from components.pages.learn.book import N_PLOTS, Guess
from components.pages.learn.tab import N, run_and_hand_over
from components.render.base import empty_figure
from components.serving.classroom import ClassLimits, MemoryRoomStore, RoomError
from components.serving.classroom.http import GONE, STAGE_PATH, stage_route
from tests.class_helpers import SKIP, Page, plain

BASE = "http://127.0.0.1:7860/?tab=learn"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ngram_extractive.json"
VERIFY_MS = [30.0, 31.0, 35.0, 36.0, 50.0, 52.0, 60.0, 62.0, 70.0]      # chapter 1's memo: a forward over 1..9 tokens


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def run_outputs(number: int = 1, memo=None) -> tuple:
    """A chapter run's outputs as the Learn tab returns them: note, figures, memo, answer cleared."""
    figures = [empty_figure(f"run figure {i}", "drawn") for i in range(N_PLOTS)]
    return ("<div class='sd-learn-note'><p>the run</p></div>", *figures, memo or {"verify_ms": VERIFY_MS}, "")


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(clock):
    return MemoryRoomStore(ClassLimits(rooms=3, students=5, life_s=3600.0), clock)


@pytest.fixture
def lead(store):
    panel = ld.start_class(store, BASE)
    return panel[0]


# --- the presenter's start ---------------------------------------------------------------------------------------

def test_start_shows_the_code_the_join_link_and_its_qr(store):
    panel = ld.start_class(store, BASE + "#x")
    lead = panel[0]
    code = lead["code"]
    shown = f"{code[:4]}-{code[4:]}"
    assert panel[1] == lead and shown in panel[2]
    assert f"http://127.0.0.1:7860/?class={code}" in panel[3] and 'src="data:image/svg+xml' in panel[3]
    assert "Guesses in: <b>0</b> of <b>0</b>" in panel[4]
    link = plain(panel[8])["value"]
    assert link == f"http://127.0.0.1:7860/?presenter=1&lead={code}.{lead['secret']}"
    assert ld.parse_lead_param(link.split("lead=")[1]) == lead
    assert plain(panel[9]) == {"active": True}
    again = ld.start_class(store, BASE, lead)                 # a page that leads keeps its room
    assert again[0] == lead and store.rooms() == 1


def test_start_refuses_past_the_servers_rooms(store):
    for _ in range(3):
        ld.start_class(store, BASE)
    panel = ld.start_class(store, BASE)
    assert panel[0] is None and "already running 3 classes" in panel[5]


@pytest.mark.parametrize("base", ["javascript:alert(1)", "http://x/<script>", None, 5, "http://" + "x" * 400])
def test_a_strange_page_address_gives_a_relative_link(store, base):
    panel = ld.start_class(store, base)
    code = panel[0]["code"]
    assert f"<b>?class={code}</b>" in panel[3] and "<script>" not in panel[3] and "javascript" not in panel[3]


# --- a chapter with the class --------------------------------------------------------------------------------

def test_a_chapter_from_join_to_reveal_and_on(store, lead):
    code, secret = lead["code"], lead["secret"]
    pg = Page(store, code.lower())
    assert "Chapter 1 / 13" in pg["title"] and "wait for your presenter's run" in pg["status"]
    assert pg.ids == {"last": code, "ids": {code: pg.me["student"]}} and pg.props("timer") == {"active": True}
    assert "drawn here when your presenter reveals" in pg.shown["histogram"].plot
    assert not pg.tick()                                          # nothing new: nothing redrawn
    assert pg.sent[-1] == (f"{code}:{store.stage(code)}",)        # the poll sends one short key on

    run = run_outputs()
    assert run_and_hand_over(lambda *a: run, lambda *a: ld.publish_run(store, *a), 1, None, 900, lead) == run
    assert pg.tick()
    drawn = pg.shown["plot1"].plot
    assert json.loads(drawn)["layout"]["title"]["text"].startswith("run figure 0")
    assert store.student_view(code, pg.me["student"]).shown.figures[0] is drawn    # the room's JSON, made once
    slider = pg.props("slider")
    assert (slider["minimum"], slider["maximum"], slider["step"], slider["visible"]) == (1.0, 8.0, 0.25, True)
    assert "guess, then Send" in pg["status"] and not pg.tick()

    assert pg["touched"] is False and "move the slider" in pg.send(1.0, touched=False)   # where it starts: no guess
    assert "Guesses in: <b>0</b>" in ld.lead_poll(store, lead, -1)[4]
    assert "Sent: 2.5" in pg.send(2.5)
    count = ld.lead_poll(store, lead, -1)[4]
    assert "Guesses in: <b>1</b> of <b>1</b>" in count
    late = Page(store, code)
    assert "guess, then Send" in late["status"] and late.shown["plot1"].plot is drawn   # a late joiner: the run as it is
    assert "Sent: 6" in late.send(6)

    revealed = ld.reveal_to_class(store, None, lead)
    assert "Revealed to the class: 2 guesses" in revealed[0] and plain(revealed[2]) == {"visible": True}
    assert "This run:" in revealed[3] and "The class:" in revealed[3]
    fig = json.loads(revealed[4].plot)
    assert sum(sum(t["y"]) for t in fig["data"] if t["type"] == "bar") == 2
    assert "2 in" in fig["layout"]["title"]["text"]
    assert revealed[5] == revealed[3]                                 # chapter 1's answer slot on this page
    assert all(x == SKIP for x in revealed[5 + 1 + N_PLOTS:])         # the other chapters' slots are left

    assert pg.tick()
    assert "Your guess:</b> 2.5" in pg["answer"] and "The class:</b> 2 guesses in" in pg["answer"]
    assert pg.shown["histogram"].plot == revealed[4].plot and "the answer is out" in pg["status"]
    assert "not sent" in pg.send(3).lower()

    follow = ld.follow_chapter(store, lead, 2)
    assert "chapter 2" in follow[0] and plain(follow[3]) == {"visible": False}
    assert pg.tick()
    assert "Chapter 2 / 13" in pg["title"] and "drawn here when your presenter" in pg.shown["histogram"].plot
    assert (pg.props("slider")["minimum"], pg.props("slider")["maximum"]) == (0, 4)
    assert pg["answer"] == "" and "wait for your presenter's run" in pg["status"]
    assert store.lead(code, secret).chapter == 2


def test_a_refresh_is_one_event_of_plain_values_unless_the_chapter_changed(store, lead):
    """A run, a lock: one refresh each, every output a plain value (no gradio update, which costs the server a
    component per output); another chapter: the guess control set up again."""
    pg = Page(store, lead["code"])
    assert isinstance(pg.shown["slider"], gr.Slider)                     # set up on joining
    ld.publish_run(store, lead, 1, run_outputs(), None)
    pg.tick()
    assert not any(isinstance(v, gr.components.Component) or v == SKIP for v in pg.sent[-1])
    n = len(pg.sent)
    ld.lock_guesses(store, lead)
    assert pg.tick()
    new = pg.sent[n:]
    assert len(new) == 2 and len(new[1]) == len(st.REFRESH)          # the poll's key, then one refresh
    assert not any(isinstance(v, gr.components.Component) or v == SKIP for v in new[1])
    assert pg.shown["slider"] == 1.0 and pg.props("slider")["maximum"] == 8.0
    ld.follow_chapter(store, lead, 3)
    pg.tick()
    assert isinstance(pg.shown["radio"], gr.Radio) and pg.props("radio")["visible"]


def test_a_reload_keeps_the_student_and_the_guess(store, lead):
    code = lead["code"]
    pg = Page(store, code)
    before = dict(pg.me)
    ld.publish_run(store, lead, 1, run_outputs(), None)
    assert "moved on" in st.send_guess(store, before, 3.25, None)     # a page still on the run before
    pg.tick()
    assert "Sent: 3.25" in pg.send(3.25)
    again = Page(store, f"{code[:4]}-{code[4:]}", pg.ids)
    assert again.me["student"] == pg.me["student"] and again.ids == pg.ids
    assert "Your guess: 3.25 (sent)" in again["status"] and again.props("slider")["value"] == 3.25
    assert again["touched"] is True                     # a sent guess can be sent again as it is
    assert not again.tick() and again.props("slider")["value"] == 3.25
    bare = Page(store, "", pg.ids)                      # /class without a code: the class this browser was in
    assert "Your guess: 3.25 (sent)" in bare["status"]
    assert store.lead(code, lead["secret"]).students == 1


def test_the_presenter_takes_the_class_back_after_a_reload(store, lead):
    ld.follow_chapter(store, lead, 4)
    out = ld.restore_lead(store, "", lead, BASE)
    assert out[0] == lead and "You lead this class again" in out[5]
    assert plain(out[ld.N_PANEL])["value"] == 4 and "Chapter 4 / 13" in out[ld.N_PANEL + 1]    # the Learn page moves
    link = f"{lead['code']}.{lead['secret']}"
    assert ld.restore_lead(store, link, None, BASE)[0] == lead
    bad = ld.restore_lead(store, "7KX4MP9A.not-a-secret", None, BASE)
    assert bad[0] is None and "not one this server issued" in bad[5]
    store.end(lead["code"], lead["secret"])
    stale = ld.restore_lead(store, "", lead, BASE)
    assert stale[0] is None and stale[5] == ""              # a stale stored lead is dropped quietly
    assert ld.restore_lead(store, "", None, BASE) == (SKIP,) * (ld.N_PANEL + 2 + N)


def test_lock_closes_sending_and_opens_it_again(store, lead):
    pg = Page(store, lead["code"])
    ld.publish_run(store, lead, 1, run_outputs(), None)
    pg.tick()
    panel = ld.lock_guesses(store, lead)
    assert "Guesses locked" in panel[5] and plain(panel[11])["value"] == "Open guesses again"
    pg.tick()
    assert "guesses are locked" in pg["status"] and "Guessing is closed" in pg.send(2)
    assert "open again" in ld.lock_guesses(store, lead)[5]
    assert "Sent: 2" in pg.send(2)


def test_a_choice_chapter_with_a_setting_chosen_at_reveal(store, lead, monkeypatch):
    """Chapter 5: the bug the presenter picks reaches the class, and the Reveal runs the toy sampler once for all."""
    monkeypatch.setattr(basics, "LAB_RUNS", 300)
    ch = class_chapter(5)
    bug = ch.setting.choices[0][1]
    ld.follow_chapter(store, lead, 5)
    run = (basics.note("the correct sampler"), empty_figure("a", "b"), empty_figure("c", "d"),
           {"checked": True, "scale": 1}, "")
    ld.publish_run(store, lead, 5, run, bug)
    pages = [Page(store, lead["code"]) for _ in range(3)]
    assert ch.setting.choices[0][0] in pages[0]["note"]
    ld.choose_setting(store, lead, ch.setting.choices[-1][1], number=5)
    assert pages[0].tick() and ch.setting.choices[-1][0] in pages[0]["note"]
    radio = pages[0].props("radio")
    assert radio["choices"] == list(ch.guess.choices) and radio["value"] is None and radio["visible"]
    for pg, guess in zip(pages, ("biased", "biased", "stays exact")):
        assert "Sent" in pg.send(1.0, guess)
    assert "Not sent: pick one of the answers" in pages[0].send(1.0, None)
    revealed = ld.reveal_to_class(store, None, lead)
    fig = json.loads(revealed[4].plot)
    per = {}
    for t in fig["data"]:
        for x, y in zip(t["x"], t["y"]):
            per[x.replace(" ✓", "")] = per.get(x.replace(" ✓", ""), 0) + y
    assert per == {"stays exact": 1, "biased": 2}
    assert store.lead(lead["code"], lead["secret"]).phase == "revealed"
    for pg in pages:
        pg.tick()
        assert pg.shown["histogram"].plot == revealed[4].plot and "Your guess:</b>" in pg["answer"]


def test_a_reveal_before_the_run_says_so_and_changes_nothing(store, lead):
    out = ld.reveal_to_class(store, None, lead)
    assert "Run this chapter first" in out[0] and store.lead(lead["code"], lead["secret"]).phase == "waiting"


def test_a_reveal_that_fails_opens_guessing_again(store, lead):
    ld.publish_run(store, lead, 1, run_outputs(memo={"verify_ms": [1.0]}), None)    # too short a curve to answer
    out = ld.reveal_to_class(store, None, lead)
    assert "press Run again" in out[0] and store.lead(lead["code"], lead["secret"]).phase == "open"


def test_the_live_run_reaches_the_class(store, lead):
    pg = Page(store, lead["code"])
    assert pg.props("live") == {"visible": False}
    assert "Make a Live run first" in ld.push_live(store, lead, None)
    trace = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert "went to the class" in ld.push_live(store, lead, trace)
    assert pg.tick()
    assert pg.props("live") == {"visible": True} and "sd-tokens" in pg["live_html"]
    assert json.loads(pg.shown["live_plot"].plot)["data"]
    assert "lead" in ld.push_live(store, pg.me, trace).lower()            # a student's page cannot push one


# --- refusals -----------------------------------------------------------------------------------------------

def test_wrong_expired_and_full_rooms_each_say_so_in_one_line(store, lead, clock):
    code = lead["code"]
    for raw, words in (("not a code", "is not a class code"), ("7KX4-MP9A", "There is no class 7KX4-MP9A here")):
        pg = Page(store, raw)
        status = pg["status"]
        assert words in status and status.count("<p") == 1 and "\n" not in status
        assert pg.props("form") == {"visible": True} and pg.props("timer") == {"active": False}
    pages = [Page(store, code) for _ in range(5)]
    assert "This class is full" in Page(store, code)["status"]
    clock.t += 3601
    assert f"There is no class {code[:4]}-{code[4:]} here" in Page(store, code)["status"]
    assert pages[0].tick()                              # a page in an expired class says so and stops polling
    assert "There is no class" in pages[0]["status"] and pages[0].props("timer") == {"active": False}
    assert pages[0].props("form") == {"visible": True}


def test_a_student_page_cannot_lead(store, lead):
    code = lead["code"]
    me = Page(store, code).me
    ld.publish_run(store, lead, 1, run_outputs(), None)
    forged = [None, {}, me, {"code": code}, {"code": code, "secret": me["student"]},
              {"code": code, "secret": "A" * 32}, {"code": code, "secret": lead["secret"][:-1] + "x"}]
    for bad in forged:
        assert "lead" in ld.lock_guesses(store, bad)[5].lower()
        assert "lead" in ld.reveal_to_class(store, None, bad)[0].lower()
        moved = ld.follow_chapter(store, bad, 3)[0]
        assert moved == SKIP if not bad else "lead" in moved.lower()
        with pytest.warns(UserWarning, match="did not get this setting") if bad else contextlib.nullcontext():
            ld.choose_setting(store, bad, "x", number=5)
    view = store.lead(code, lead["secret"])
    assert (view.chapter, view.phase) == (1, "open")


def test_nothing_a_student_is_sent_holds_the_secret(store, lead):
    code, secret = lead["code"], lead["secret"]
    pg = Page(store, code)
    ld.publish_run(store, lead, 1, run_outputs(), None)
    pg.tick()
    pg.send(4)
    ld.reveal_to_class(store, None, lead)
    pg.tick()
    again = Page(store, code, pg.ids)
    ld.push_live(store, lead, json.loads(EXAMPLE.read_text(encoding="utf-8")))
    ld.follow_chapter(store, lead, 2)
    pg.tick()
    text = pg.everything_sent() + again.everything_sent()
    assert secret not in text and "lead=" not in text and len(text) > 10_000


def test_check_guess_reads_a_slider_as_the_store_keeps_it():
    g = Guess("k", 0, 4, 1)
    assert check_guess(g, 3.0) == 3 and isinstance(check_guess(g, 3.0), int)
    assert check_guess(Guess("x", 1.0, 8.0, 0.25), 2.5) == 2.5
    for bad in (5, -1, "<b>", "2", None, [], float("nan"), True, 10**400, -(10**400)):
        with pytest.raises(ValueError, match="the guess must be a number from 0 to 4"):
            check_guess(g, bad)


def test_a_run_is_shown_with_its_figures_as_json_once():
    shown = shown_run(3, "<p>n</p>", [empty_figure("t", "m"), None], 1.0)
    assert json.loads(shown.figures[0])["layout"]["title"]["text"].startswith("t")
    assert "Drawn when your presenter reveals" in shown.figures[1]
    assert shown.setting == "decoding: sampling (temperature 1)"


def test_reveal_for_class_needs_the_run():
    from components.serving.classroom import RevealJob
    with pytest.raises(RoomError, match="Run this chapter first"):
        reveal_for_class(None, RevealJob(1, 1, {}, None, {}))
    assert re.search("none came in", json.loads(reveal_for_class(
        None, RevealJob(1, 1, {"verify_ms": VERIFY_MS}, None, {})).histogram)["layout"]["title"]["text"])


def test_the_stage_route_answers_a_key_or_gone(store, lead):
    """What the students' pages poll: the room's stage key while it lives (a new key on every change they see), else
    "gone"; never cached, never more than that."""
    from starlette.applications import Starlette
    from starlette.testclient import TestClient
    code = lead["code"]
    with TestClient(Starlette(routes=[stage_route(lambda: store)])) as client:
        r = client.get(STAGE_PATH, params={"code": code.lower()})
        key = f"{code}:{store.stage(code)}"
        assert r.text == key and r.headers["cache-control"] == "no-store"
        ld.publish_run(store, lead, 1, run_outputs(), None)
        assert client.get(STAGE_PATH, params={"code": code}).text not in (key, GONE)
        for bad in ("<script>", "", "7KX4MP9A", "x" * 10_000, None):
            assert client.get(STAGE_PATH, params={} if bad is None else {"code": bad}).text == GONE
        store.end(code, lead["secret"])
        assert client.get(STAGE_PATH, params={"code": code}).text == GONE


def test_the_load_test_reads_the_pages_outputs_in_their_order():
    from tools import classload
    assert (classload.JOIN, classload.REFRESH) == (st.JOIN, st.REFRESH)
    assert classload.POLL_S == st.POLL_S and classload.STAGE_PATH == STAGE_PATH


def test_the_presenter_is_told_when_the_class_is_gone(store, lead, clock):
    clock.t += 3601
    panel = ld.lead_poll(store, lead, -1)
    code = lead["code"]
    assert panel[0] is None and f"The class {code[:4]}-{code[4:]} has ended or expired" in panel[5]
    assert plain(panel[9]) == {"active": False} and plain(panel[7]) == {"visible": True}     # Start again
