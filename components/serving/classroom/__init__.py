"""A class in one room: the rooms this server runs (``store``: the ``RoomStore`` interface and its in-process
``MemoryRoomStore``), what a room holds and the views its pages get (``room``), and its names — join codes,
presenter secrets, student ids (``codes``). No Gradio here and no chapter: the pages check guesses against a
chapter and make the figures; the store keeps them.
"""
from components.serving.classroom.codes import parse_code, shown_code
from components.serving.classroom.room import (LOCKED, OPEN, REVEALED, WAITING, ClassLimits, LeadView, LiveShown,
                                               Revealed, RevealJob, RoomError, Shown, StudentView)
from components.serving.classroom.store import MemoryRoomStore, RoomStore, default_store

__all__ = ["parse_code", "shown_code", "WAITING", "OPEN", "LOCKED", "REVEALED", "ClassLimits", "LeadView",
           "LiveShown", "Revealed", "RevealJob", "RoomError", "Shown", "StudentView", "MemoryRoomStore", "RoomStore",
           "default_store"]
