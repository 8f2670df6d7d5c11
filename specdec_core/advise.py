"""``python -m specdec_core.advise`` (installed: ``specdec-advise``): the advisor lives in ``specdec_core.cli.advise``."""
import sys

from .cli.advise import main

if __name__ == "__main__":
    sys.exit(main())
