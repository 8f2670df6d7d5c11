"""The engine's entrances on the command line: ``python -m specdec_core`` (one run, with its baseline:
``command``) and ``python -m specdec_core.advise`` (should I speculate here? a sample with its intervals and the
best K: ``advise``). Bad input gets one line on stderr and exit status 2, before any model loads."""
from .command import build_parser, config_from_args, main, summary_lines

__all__ = ["build_parser", "config_from_args", "main", "summary_lines"]
