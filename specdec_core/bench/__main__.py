"""``python -m specdec_core.bench``: see ``runner.main``."""
import sys

from .runner import main

sys.exit(main())
