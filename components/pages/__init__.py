"""The Gradio page: ``learn`` (the lesson, the first tab), ``live``, ``replay`` and ``teaching`` (Exactness lab,
Simulator, Theory, Draft comparison, K sweep), the step-through ``viewer`` they share, ``links`` (the Live
settings as a URL), ``presenter`` (presenter mode and the keyboard), ``export`` (trace files and the
standalone replay) and ``context`` (what the tabs share). Handlers are module-level functions the tests call
without a browser; they check input through ``serving`` and draw with ``render``.
"""
