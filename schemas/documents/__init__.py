"""One home per modality for its artifact document format and its rules.

Each module here parses and validates one modality's artifact bytes, with no
I/O, no clock and no randomness, and each is used by three callers that must
agree: the producer SDK that builds the document (``producers/``), the
scheduler that refuses a submission breaking a rule decidable from its own
bytes (``consumers/core/step.py``) and the offline verifier (``verifier/``).

* ``quotes``   the quote normalisation (``bernstein.quote-normalisation/v1``);
* ``research`` the research report (citation model) and the abort records;
* ``dataops``  the data/ops receipt (structure, plan projection, plan-before-effect
  order) and the data/ops refusal record;
* ``browser``  the computer-use session: canonical action, anchors, lineage entry,
  action log, session document and terminal-state mapping;
* ``rules``    what the scheduler asks: ``submission_violation(...)`` (``record_violation``
  for a decoded record), the first broken rule of a submission as a typed
  ``Violation`` (a ``RefusalCode``).

Verification that needs pinned keys or the content store lives above it:
``bernstein.substrate.dataops_receipts`` (shared by the data/ops SDK and the verifier) and
``bernstein.verifier.browser_replay``. Nothing here imports ``producers``, ``substrate``,
``consumers``, ``verifier`` or ``bernstein`` (the layer contract,
``[tool.importlinter]`` in ``pyproject.toml``). The scheduler's rules and codes are
documented in ``docs/modality_rules.md``.
"""
