"""Pure builders: a Trace (or an exactness lab's or sweep's result) in, a ``go.Figure`` or an HTML string out.
No Gradio, no model, no clock: the same input always draws the same picture, and the tests compare figure data.

``base`` (the house layout, the "nothing yet" figure, which iteration a view opens on) and ``palette`` (the
Okabe-Ito colours and shape cues) are shared by ``figures`` (the Live and Replay figures), ``anatomy`` (one
iteration laid out step by step), ``tree`` (a token tree and its verify's mask), ``cost`` (where the time went),
``lab`` (the teaching tabs' figures) and ``whatif`` (the run priced on other hardware); ``tokens``, ``summary``
and ``measures`` render the token stream and the numbers a page shows; ``replay_html`` writes the standalone
replay page.
"""
