"""Cost policy: the closed-form theory (``closed_form``), the calibrated cost model (``costmodel``) and its
pricing of token trees (``tree_cost``), calibration of this device's forward costs (``calibration``), the K
policies that choose each iteration's draft count or tree (``kpolicy``), and the best K schedule in hindsight
(``hindsight``).

May import: the bottom layer (``config``, ``trace``, ``timing``), ``models`` and ``drafters``."""
