"""A class's pages without a browser: the presenter's handlers on an in-process room store, and students' pages
through the class's JSON routes (``tests.class_helpers.Page``: join, the room's document as its event stream sends
it, Send), with runs made of recorded values (no model): start, join, the run published once and drawn from the same
JSON on every page, Send, the count, a Reveal judged for every guess, the class following the presenter; a reload
keeps the student and the presenter; wrong, expired and full rooms each say so in one line; the guess timer,
nicknames, removing a student, the results kept; a page without the secret cannot lead, and nothing a student is
sent holds it."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from components.pages.classroom import lead as ld
from components.pages.classroom import manage as mg
from components.pages.classroom.publish import (TOKENS_AT_REVEAL, class_chapter, question_of,
                                                reveal_for_class, shown_run)
from components.pages.learn import basics
from components.pages.learn.book import N_PLOTS, Guess
from components.pages.learn.tab import N, run_and_hand_over
from components.render.base import empty_figure
from components.serving.classroom import ClassLimits, MemoryRoomStore, RevealJob, RoomError
from specdec_core import Trace
from tests.class_helpers import Page, class_app

BASE = "http://127.0.0.1:7860/?tab=learn"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ngram_extractive.json"
VERIFY_MS = [30.0, 31.0, 35.0, 36.0, 50.0, 52.0, 60.0, 62.0, 70.0]      # chapter 1's memo: a forward over 1..9 tokens
SKIP = ld.gr.skip()


class Clock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def run_outputs(number: int = 1, memo=None) -> tuple:
    """A chapter run's outputs as the Learn tab returns them: note, figures, memo, answer cleared."""
    figures = [empty_figure(f"run figure {i}", "drawn") for i in range(N_PLOTS)]
    return ("<div class='sd-learn-note'><p>the run</p></div>", *figures, memo or {"verify_ms": VERIFY_MS}, "")


def plain(update):
    return update._constructor_args[0] if hasattr(update, "_constructor_args") else update


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(clock):
    return MemoryRoomStore(ClassLimits(rooms=3, students=5, life_s=3600.0), clock)


@pytest.fixture
def client(store):
    with TestClient(class_app(store)) as c:
        yield c


@pytest.fixture
def lead(store):
    return ld.start_class(store, BASE)[0]


# --- the presenter's start ---------------------------------------------------------------------------------------

def test_start_shows_the_code_the_join_link_and_its_qr(store):
    panel = ld.start_class(store, BASE + "#x")
    lead = panel[0]
    code = lead["code"]
    assert panel[1] == lead and f"{code[:4]}-{code[4:]}" in panel[2]
    assert f"http://127.0.0.1:7860/?class={code}" in panel[3] and 'src="data:image/svg+xml' in panel[3]
    assert "Guesses in: <b>0</b> of <b>0</b>" in panel[4]
    link = plain(panel[8])["value"]
    assert link == f"http://127.0.0.1:7860/?presenter=1&lead={code}.{lead['secret']}"
    assert ld.parse_lead_param(link.split("lead=")[1]) == lead
    assert plain(panel[9]) == {"active": True}
    again = ld.start_class(store, BASE, lead)                 # a page that leads keeps its room
    assert again[0] == lead and store.rooms() == 1
    assert not store.lead(code, lead["secret"]).nicknames     # anonymous unless asked
    asked = ld.start_class(store, BASE, None, True)[0]
    assert store.lead(asked["code"], asked["secret"]).nicknames


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

def test_a_chapter_from_join_to_reveal_and_on(store, client, lead):
    code, secret = lead["code"], lead["secret"]
    pg = Page(client, store, code.lower())
    assert pg.joined["_status"] == 200 and pg.joined["handle"] == 1 and pg.joined["guess"] is None
    room = pg.room()
    assert (room["chapter"], room["of"], room["phase"], room["run"], room["reveal"]) == (1, N, "waiting", None, None)

    run = run_outputs()
    assert run_and_hand_over(lambda *a: run, lambda *a: ld.publish_run(store, *a), 1, None, 900, lead) == run
    room = pg.room()
    assert room["phase"] == "open" and room["title"] == class_chapter(1).title and "<strong>" in room["text"]
    drawn = pg.figure(room["run"]["figures"][0])
    assert drawn["layout"]["title"]["text"].startswith("run figure 0")
    assert room["guess"] == {"label": class_chapter(1).guess.label, "min": 1.0, "max": 8.0, "step": 0.25,
                             "choices": []}
    again = Page(client, store, code).room()                      # every page: the same figure JSON, made once
    assert again["run"]["figures"] == room["run"]["figures"]

    assert "Guesses in: <b>0</b>" in ld.lead_poll(store, lead, -1)[4]
    said = pg.send(2.5)
    assert said["said"].startswith("Sent: 2.5") and said["guess"] == 2.5
    assert "Guesses in: <b>1</b> of <b>2</b>" in ld.lead_poll(store, lead, -1)[4]
    late = Page(client, store, code)
    assert late.room()["run"]["figures"] == room["run"]["figures"]          # a late joiner: the run as it is
    assert late.send(6)["guess"] == 6

    revealed = ld.reveal_to_class(store, None, lead)
    assert "Revealed to the class: 2 guesses" in revealed[0] and plain(revealed[2]) == {"visible": True}
    assert "This run:" in revealed[3] and "The class:" in revealed[3]
    fig = json.loads(revealed[4].plot)
    assert sum(sum(t["y"]) for t in fig["data"] if t["type"] == "bar") == 2 and "2 in" in fig["layout"]["title"]["text"]
    assert revealed[5] == revealed[3]                                 # chapter 1's answer slot on this page
    assert all(x == SKIP for x in revealed[5 + 1 + N_PLOTS:])         # the other chapters' slots are left

    room = pg.room()
    rev = room["reveal"]
    assert room["phase"] == "revealed" and pg.figure(rev["histogram"]) == fig
    assert rev["median"] == 4.25 and rev["total"] == 2 and rev["summary"] == revealed[3]
    assert {tuple(v)[0] for v in rev["verdicts"]} == {2.5, 6} and rev["truth"]["label"].endswith("×")
    assert rev["truth"]["low"] < rev["truth"]["value"] < rev["truth"]["high"]
    assert "closed" in pg.send(3)["error"]

    follow = ld.follow_chapter(store, lead, 2)
    assert "chapter 2" in follow[0] and plain(follow[3]) == {"visible": False}
    room = pg.room()
    assert (room["chapter"], room["phase"], room["reveal"], room["run"]) == (2, "waiting", None, None)
    assert (room["guess"]["min"], room["guess"]["max"]) == (0, 4)
    assert store.lead(code, secret).chapter == 2


def test_the_results_keep_each_reveal_as_csv_and_json(store, client, lead):
    pages = [Page(client, store, lead["code"]) for _ in range(3)]
    ld.publish_run(store, lead, 1, run_outputs(), None)
    for pg, value in zip(pages, (1.5, 2.0, 8.0)):
        pg.send(value)
    ld.reveal_to_class(store, None, lead)
    status, files = mg.export_results(store, lead)
    assert "Results of 1 chapter (3 guesses)" in status and plain(files)["visible"]
    csv_path, json_path = plain(files)["value"]
    rows = list(csv.DictReader(io.StringIO(Path(csv_path).read_text(encoding="utf-8"))))
    assert [float(r["guess"]) for r in rows] == [1.5, 2.0, 8.0]
    assert {r["chapter"] for r in rows} == {"1"} and {r["total"] for r in rows} == {"3"}
    assert all(float(r["low"]) < float(r["value"]) < float(r["high"]) for r in rows)
    kept = json.loads(Path(json_path).read_text(encoding="utf-8"))
    assert [g["guess"] for g in kept["chapters"][0]["guesses"]] == [1.5, 2.0, 8.0]
    assert kept["chapters"][0]["right"] == sum(g["verdict"] == "right" for g in kept["chapters"][0]["guesses"])
    text = Path(csv_path).read_text() + Path(json_path).read_text()
    assert all(pg.student not in text for pg in pages) and lead["secret"] not in text   # anonymous
    r = client.get("/class/api/results", params={"code": lead["code"], "format": "csv"},
                   headers={"Authorization": f"Bearer {lead['secret']}"})
    assert r.status_code == 200 and r.text == Path(csv_path).read_text(encoding="utf-8")
    assert "attachment" in r.headers["content-disposition"]


def test_nothing_to_export_before_a_reveal(store, lead):
    status, files = mg.export_results(store, lead)
    assert "Nothing to export yet" in status and plain(files)["visible"] is False


def test_a_reload_keeps_the_student_and_the_guess(store, client, lead):
    code = lead["code"]
    pg = Page(client, store, code)
    before = pg.room()
    ld.publish_run(store, lead, 1, run_outputs(), None)
    assert "moved on" in pg.send(3.25, run_no=before["run_no"])["error"]     # a page still on the run before
    assert pg.send(3.25)["guess"] == 3.25
    again = Page(client, store, f"{code[:4]}-{code[4:]}", pg.student)
    assert (again.student, again.joined["guess"], again.joined["handle"]) == (pg.student, 3.25, 1)
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


def test_lock_closes_sending_and_opens_it_again(store, client, lead):
    pg = Page(client, store, lead["code"])
    ld.publish_run(store, lead, 1, run_outputs(), None)
    panel = ld.lock_guesses(store, lead)
    assert "Guesses locked" in panel[5] and plain(panel[11])["value"] == "Open guesses again"
    assert pg.room()["phase"] == "locked" and "Guessing is closed" in pg.send(2)["error"]
    assert "open again" in ld.lock_guesses(store, lead)[5]
    assert pg.send(2)["guess"] == 2


def test_the_timer_counts_down_on_every_page_and_locks_at_zero(store, client, lead, clock):
    pg = Page(client, store, lead["code"])
    assert "while guessing is open" in mg.start_timer(store, lead, 30)[0]         # before the run
    ld.publish_run(store, lead, 1, run_outputs(), None)
    status, count, seen = mg.start_timer(store, lead, 30)
    assert "guesses lock in 30 s" in status and "⏱ 30 s left" in count
    assert pg.room()["deadline"] == pytest.approx(clock.t + 30)
    clock.t += 12
    tick = ld.lead_poll(store, lead, seen)
    assert "⏱ 18 s left" in tick[4] and tick[10] != seen               # the presenter's count each second
    assert ld.lead_poll(store, lead, tick[10])[4] == SKIP                # nothing new within the same second
    assert pg.send(2)["guess"] == 2
    clock.t += 18.5
    assert "closed" in pg.send(3)["error"]
    tick = ld.lead_poll(store, lead, tick[10])
    assert "guesses locked" in tick[4] and "⏱" not in tick[4]
    assert (pg.room()["phase"], pg.room()["deadline"]) == ("locked", None)
    assert "1 to 600 seconds" in mg.start_timer(store, lead, "<b>")[0]


def test_nicknames_when_the_presenter_asks_and_removing_a_student(store, client):
    lead = ld.start_class(store, BASE, None, True)[0]
    ld.publish_run(store, lead, 1, run_outputs(), None)
    nameless = Page(client, store, lead["code"])
    assert nameless.joined["_status"] == 400 and nameless.joined["reason"] == "nickname"
    rude = Page(client, store, lead["code"], nickname="xXb1tchXx")
    assert rude.joined["_status"] == 400 and "another nickname" in rude.joined["error"]
    ann = Page(client, store, lead["code"], nickname="<b>Ann</b>")
    assert ann.joined["_status"] == 400 and "letters, digits" in ann.joined["error"]
    ann = Page(client, store, lead["code"], nickname="Ann O'Neil")
    bob = Page(client, store, lead["code"], nickname="Bob")
    assert (ann.joined["nickname"], bob.joined["handle"]) == ("Ann O'Neil", 2)
    ann.send(3)
    listed = plain(mg.roster(store, lead))["choices"]
    assert listed == [("Ann O'Neil (#1) ✓", 1), ("Bob (#2)", 2)]
    status, count, roster = mg.remove_student(store, lead, 1)
    assert "Student #1 was removed" in status and "Guesses in: <b>0</b> of <b>1</b>" in count
    assert plain(roster)["choices"] == [("Bob (#2)", 2)]
    assert ann.room()["removed"] == [1] and "removed you" in ann.send(4)["error"]
    assert "removed you" in Page(client, store, lead["code"], ann.student).joined["error"]
    assert "Pick a student" in mg.remove_student(store, lead, None)[0]
    assert "not in this class" in mg.remove_student(store, lead, 1)[0]
    assert "Ann" not in json.dumps(bob.room())                          # students never see nicknames


def test_a_choice_chapter_with_a_setting_chosen_at_reveal(store, client, lead, monkeypatch):
    """Chapter 5: the bug the presenter picks reaches the class, and the Reveal runs the toy sampler once for all."""
    monkeypatch.setattr(basics, "LAB_RUNS", 300)
    ch = class_chapter(5)
    bug = ch.setting.choices[0][1]
    ld.follow_chapter(store, lead, 5)
    run = (basics.note("the correct sampler"), empty_figure("a", "b"), empty_figure("c", "d"),
           {"checked": True, "scale": 1}, "")
    ld.publish_run(store, lead, 5, run, bug)
    pages = [Page(client, store, lead["code"]) for _ in range(3)]
    assert ch.setting.choices[0][0] in pages[0].room()["run"]["setting"]
    ld.choose_setting(store, lead, ch.setting.choices[-1][1], number=5)
    assert ch.setting.choices[-1][0] in pages[0].room()["run"]["setting"]
    assert pages[0].room()["guess"]["choices"] == list(ch.guess.choices)
    for pg, guess in zip(pages, ("biased", "biased", "stays exact")):
        assert pg.send(guess)["guess"] == guess
    assert "The guess must be one of" in pages[0].send("neither")["error"]
    assert "A guess is a number or one of the answers" in pages[0].send(None)["error"]
    revealed = ld.reveal_to_class(store, None, lead)
    fig = json.loads(revealed[4].plot)
    per = {}
    for t in fig["data"]:
        for x, y in zip(t["x"], t["y"]):
            per[x.replace(" ✓", "")] = per.get(x.replace(" ✓", ""), 0) + y
    assert per == {"stays exact": 1, "biased": 2}
    rev = pages[0].room()["reveal"]
    assert pages[0].figure(rev["histogram"]) == fig and rev["median"] == "biased"


def test_a_reveal_before_the_run_says_so_and_changes_nothing(store, lead):
    out = ld.reveal_to_class(store, None, lead)
    assert "Run this chapter first" in out[0] and store.lead(lead["code"], lead["secret"]).phase == "waiting"


def test_a_reveal_that_fails_opens_guessing_again(store, lead):
    ld.publish_run(store, lead, 1, run_outputs(memo={"verify_ms": [1.0]}), None)    # too short a curve to answer
    out = ld.reveal_to_class(store, None, lead)
    assert "press Run again" in out[0] and store.lead(lead["code"], lead["secret"]).phase == "open"


def test_the_live_run_reaches_the_class(store, client, lead):
    pg = Page(client, store, lead["code"])
    assert pg.room()["live"] is None
    assert "Make a Live run first" in ld.push_live(store, lead, None)
    trace = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert "went to the class" in ld.push_live(store, lead, trace)
    live = pg.room()["live"]
    assert live["no"] == 1 and "sd-tokens" in live["html"] and pg.figure(live["figure"])["data"]
    assert "lead" in ld.push_live(store, {"code": pg.code, "secret": pg.student}, trace).lower()


def test_the_runs_tokens_come_with_the_run_or_with_the_reveal_where_they_would_answer(store, client, lead):
    trace = Trace.from_dict(json.loads(EXAMPLE.read_text(encoding="utf-8")))
    pg = Page(client, store, lead["code"])
    ld.publish_run(store, lead, 3, (basics.note("run"), None, None, {"trace": trace}, ""), None)
    assert "sd-tok" in pg.room()["run"]["tokens"] and "greedy" not in TOKENS_AT_REVEAL
    ld.publish_run(store, lead, 2, (basics.note("run"), None, None, {"trace": trace, "index": 1}, ""), None)
    assert "anatomy" in TOKENS_AT_REVEAL and pg.room()["run"]["tokens"] == ""
    pg.send(1)
    ld.reveal_to_class(store, None, lead)
    assert "sd-tok" in pg.room()["run"]["tokens"]


# --- refusals -----------------------------------------------------------------------------------------------

def test_wrong_expired_and_full_rooms_each_say_so_in_one_line(store, client, lead, clock):
    code = lead["code"]
    for raw, words, status in (("not a code", "is not a class code", 404),
                               ("7KX4-MP9A", "There is no class 7KX4-MP9A here", 404)):
        pg = Page(client, store, raw)
        assert words in pg.joined["error"] and pg.joined["_status"] == status and "\n" not in pg.joined["error"]
    pages = [Page(client, store, code) for _ in range(5)]
    full = Page(client, store, code).joined
    assert "This class is full" in full["error"] and full["_status"] == 409
    clock.t += 3601
    gone = Page(client, store, code).joined
    assert f"There is no class {code[:4]}-{code[4:]} here" in gone["error"] and gone["_status"] == 404
    sent = client.post("/class/api/guess", json={"code": code, "student": pages[0].student, "chapter": 1, "run_no": 0,
                                                 "value": 1})
    assert sent.status_code == 404 and "There is no class" in sent.json()["error"]
    with pytest.raises(RoomError, match="There is no class"):
        pages[0].room()


def test_a_student_page_cannot_lead(store, client, lead):
    code = lead["code"]
    me = Page(client, store, code).student
    ld.publish_run(store, lead, 1, run_outputs(), None)
    forged = [None, {}, {"code": code}, {"code": code, "secret": me}, {"code": code, "secret": "A" * 32},
              {"code": code, "secret": lead["secret"][:-1] + "x"}]
    for bad in forged:
        assert "lead" in ld.lock_guesses(store, bad)[5].lower()
        assert "lead" in ld.reveal_to_class(store, None, bad)[0].lower()
        moved = ld.follow_chapter(store, bad, 3)[0]
        assert moved == SKIP if not bad else "lead" in moved.lower()
        assert "lead" in mg.start_timer(store, bad, 30)[0].lower()
        assert "lead" in mg.remove_student(store, bad, 1)[0].lower()
        assert "lead" in mg.export_results(store, bad)[0].lower()
        with pytest.warns(UserWarning, match="did not get this setting") if bad else contextlib.nullcontext():
            ld.choose_setting(store, bad, "x", number=5)
        r = client.get("/class/api/results", params={"code": code},
                       headers={"Authorization": f"Bearer {(bad or {}).get('secret', me)}"})
        assert r.status_code == 403 and "presenter" in r.json()["error"]
    view = store.lead(code, lead["secret"])
    assert (view.chapter, view.phase) == (1, "open")


def test_nothing_a_student_is_sent_holds_the_secret(store, client, lead):
    code, secret = lead["code"], lead["secret"]
    pg = Page(client, store, code)
    ld.publish_run(store, lead, 1, run_outputs(), None)
    pg.room()
    pg.send(4)
    mg.start_timer(store, lead, 60)
    pg.room()
    ld.reveal_to_class(store, None, lead)
    pg.room()
    again = Page(client, store, code, pg.student)
    ld.push_live(store, lead, json.loads(EXAMPLE.read_text(encoding="utf-8")))
    again.room()
    ld.follow_chapter(store, lead, 2)
    pg.room()
    text = pg.everything_sent() + again.everything_sent()
    assert secret not in text and "lead=" not in text and len(text) > 10_000


# --- the pieces ----------------------------------------------------------------------------------------------

def test_a_guess_is_read_as_the_store_keeps_it():
    g = Guess("k", 0, 4, 1)
    assert g.check(3.0) == 3 and isinstance(g.check(3.0), int)
    assert Guess("x", 1.0, 8.0, 0.25).check(2.5) == 2.5
    for bad in (5, -1, "<b>", "2", None, [], float("nan"), True, 10**400, -(10**400), 2.5):
        with pytest.raises(ValueError, match="the guess must be a number from 0 to 4"):
            g.check(bad)


def test_a_run_is_shown_with_its_figures_as_json_once():
    shown = shown_run(3, "<p>n</p>", [empty_figure("t", "m"), None], 1.0)
    assert json.loads(shown.figures[0])["layout"]["title"]["text"].startswith("t")
    assert "Drawn when your presenter reveals" in shown.figures[1]
    assert shown.setting == "decoding: sampling (temperature 1)" and shown.tokens == ""


def test_every_chapter_has_a_question_a_page_can_ask():
    for n in range(1, N + 1):
        q = question_of(n)
        assert (q.number, q.of, q.title) == (n, N, class_chapter(n).title)
        assert q.text.startswith("<p>") and "**" not in q.text and "<script" not in q.text


def test_reveal_for_class_needs_the_run():
    with pytest.raises(RoomError, match="Run this chapter first"):
        reveal_for_class(None, RevealJob(1, 1, {}, None, {}))
    revealed, result = reveal_for_class(None, RevealJob(1, 1, {"verify_ms": VERIFY_MS}, None, {}))
    assert "none came in" in json.loads(revealed.histogram)["layout"]["title"]["text"]
    assert (result.total, result.guesses, revealed.median) == (0, (), None)


def test_the_presenter_is_told_when_the_class_is_gone(store, lead, clock):
    clock.t += 3601
    panel = ld.lead_poll(store, lead, -1)
    code = lead["code"]
    assert panel[0] is None and f"The class {code[:4]}-{code[4:]} has ended or expired" in panel[5]
    assert plain(panel[9]) == {"active": False} and plain(panel[7]) == {"visible": True}     # Start again
