"""UI layer: Plotly figure builders (pure functions Trace -> go.Figure), token-stream HTML, Gradio sections.
No sampling math here."""
