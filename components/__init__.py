"""The app's half of the house, over the engine (``specdec_core``), in three floors whose imports point down:

    pages    the Gradio page: the tabs (Learn, Live, Replay, the teaching tabs), the trace viewer, links,
             presenter mode and exports; thin handlers the tests call without a browser
    serving  how a request is served: its values checked against the input limits, the run session, the
             target <- draft pairs, waiting for a model in turn and the run limits, the API, the messages
             (toasts) and the ZeroGPU wrapper; no layout
    render   pure builders from a Trace (or a lab's or sweep's result) to a Plotly figure or HTML; no Gradio

No sampling math here: what is drawn was measured by the engine.
"""
