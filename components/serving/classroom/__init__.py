"""A class in one room: the rooms this server runs (``store``: the ``RoomStore`` interface, its in-process
``MemoryRoomStore`` and, in ``redis_store``, ``RedisRoomStore`` for replicas sharing rooms), what a room holds and the
views its pages get (``room``), its names — join codes, presenter secrets, student ids (``codes``), nicknames
(``names``) —, the memo a Reveal works from as JSON (``memo``), the students' routes (``api``) and what every
student's page is sent as a room changes (``feed``), and the presenter's results as CSV and JSON (``results``). No
Gradio here and no chapter: the pages make a room's question, figures and Reveal; the store keeps them.
"""
from components.serving.classroom.codes import parse_code, shown_code
from components.serving.classroom.room import (LOCKED, OPEN, REVEALED, WAITING, ChapterResult, ClassLimits,
                                               ClassView, GuessSpec, Joined, LeadView, LiveShown, Question, Revealed,
                                               RevealJob, RoomError, Shown, Student, Truth)
from components.serving.classroom.store import MemoryRoomStore, RoomStore, default_store, store_from_env

__all__ = ["parse_code", "shown_code", "WAITING", "OPEN", "LOCKED", "REVEALED", "ChapterResult", "ClassLimits",
           "ClassView", "GuessSpec", "Joined", "LeadView", "LiveShown", "Question", "Revealed", "RevealJob",
           "RoomError", "Shown", "Student", "Truth", "MemoryRoomStore", "RoomStore", "default_store",
           "store_from_env"]
