"""A class in one room, on the page: the presenter leads from the Learn tab, every student follows on a phone.

- ``publish``: what a room is given, made once per room from the Learn chapters (the presenter's run as Plotly
  JSON; a Reveal measured once and every guess judged from it, the class's histogram, the summary);
- ``lead`` / ``lead_page``: the presenter's handlers, and the class panel on the Learn tab with its wiring;
- ``student`` / ``student_page``: the students' handlers (join, poll, send), and their page (``/class``).

The rooms themselves live in ``serving.classroom`` (the ``RoomStore``); the figures and HTML in
``render.classroom`` and ``render.qr``.
"""
