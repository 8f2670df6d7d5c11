"""``python -m specdec_core.distill``: rebuild the shipped drafts (the ``training`` subpackage's command)."""
if __name__ == "__main__":
    import sys

    from .training.__main__ import main
    sys.exit(main())
