"""How the app serves a request, with no layout: ``inputs`` checks raw values against the one set of input
limits (``specdec_core.limits``); ``pairs`` names the target <- draft pairs and loads them; ``session`` is one
run (shared by the Live tab and /generate); ``calibrate`` measures the K policy's prices once, at start-up;
``run_limits`` waits for a model in turn, cuts a run at the Space's limits and bounds the export folder;
``models`` holds the models of the teaching tabs' experiments; ``api`` is the two scripting endpoints;
``messages`` builds every toast (escaped); ``gpu`` wraps handlers for ZeroGPU. Uses ``render`` for summaries,
never ``pages``.
"""
