"""Teaching support: the exactness lab (``lab``), the toy pair over a small vocabulary (``toy``), and
the sweeps behind the K-sweep, comparison and simulator tabs (``sweeps``).

May import: everything below it (``decoding`` and down). Nothing here is imported by the engine."""
