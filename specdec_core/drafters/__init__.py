"""Drafters: whatever proposes the tokens the target verifies. The protocol and the shared drafting
loop (``base``), token-tree proposals (``tree``) and the tree growth the model drafts share (``tree_build``),
prompt lookup (``ngram``), any causal LM with its own cache (``model``), the project's
trained drafts and their shared file handling (``trained``, ``feature``), int8 decoding of a draft
(``int8``), and the name -> drafter registry the app and the CLI use (``registry``).

May import: the bottom layer (``sampling``, ``bugs``, ``timing``, ``config``) and ``models``."""
