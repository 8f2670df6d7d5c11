"""A class in one room, on the page: the presenter leads from the Learn tab, every student follows on a phone.

- ``publish``: what a room is given, made once per room from the Learn chapters (the chapter's question; the
  presenter's run as Plotly JSON; a Reveal measured once and every guess value judged from it, the class's histogram,
  the summary, and the record the presenter keeps);
- ``lead`` / ``manage`` / ``lead_page``: the presenter's handlers (leading; the timer, roster and results), and the
  class panel on the Learn tab with its wiring;
- ``student_page`` and ``static/``: the students' page (``/class``), the app's own HTML, CSS and JavaScript, which
  speaks JSON to the class's routes (``serving.classroom.api``).

The rooms themselves live in ``serving.classroom`` (the ``RoomStore``); the figures and HTML in
``render.classroom`` and ``render.qr``.
"""
