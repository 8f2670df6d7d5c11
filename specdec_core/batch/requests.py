"""The other requests a batch is filled with: what else a busy server is decoding beside your prompt.

``fill_batch(prompt, b)`` is the batch the app, ``/generate`` and the CLI run for a batch size b: your prompt in
row 0, then b − 1 other users' requests, taken in order from ``OTHER_REQUESTS`` — chat requests of different
lengths and kinds, some that copy text (prompt lookup's home ground), most open-ended — so rows have different
prompt lengths and finish at different times, as on a server.
"""
from __future__ import annotations

OTHER_REQUESTS: tuple[str, ...] = (
    "Explain how a refrigerator keeps food cold.",
    "Repeat this sentence exactly: The early train leaves the harbour at six and reaches the city by nine.",
    "Write a short story about a robot who learns to paint.",
    "What is the capital of France?",
    "Give three tips for sleeping better.",
    "Repeat this list exactly: apples, pears, plums, cherries, grapes, lemons.",
    "Summarise in one sentence why the sky is blue.",
    "Write a haiku about autumn leaves.",
    "How do I boil an egg?",
    "Translate 'good morning, how are you?' into French.",
    "List the planets of the solar system in order from the sun.",
    "Describe a cat to someone who has never seen one.",
    "Repeat exactly: def add(a, b):\n    return a + b",
    "Why do we have seasons?",
    "Suggest a name for a bakery that sells bread and coffee.",
)


def fill_batch(prompt: str, b: int) -> list[str]:
    """``prompt`` then the first b − 1 of ``OTHER_REQUESTS`` (repeated if b − 1 is more than there are)."""
    if b < 1:
        raise ValueError(f"a batch needs at least one row, got {b}")
    return [prompt] + [OTHER_REQUESTS[i % len(OTHER_REQUESTS)] for i in range(b - 1)]
