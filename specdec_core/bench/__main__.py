"""``python -m specdec_core.bench``: see ``runner.main``."""
import sys

from .command import main

sys.exit(main())
