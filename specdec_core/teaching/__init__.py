"""Teaching support: the exactness lab (``lab``), the toy pair over a small vocabulary (``toy``),
the sweeps behind the K-sweep, comparison and simulator tabs (``sweeps``), and the sweep over batch sizes
(``batches``: where speculation stops paying on a busy server).

May import: everything below it (``decoding``, ``batch`` and down). Nothing here is imported by the engine."""
