"""``bernstein activity verify RUN --wacz FILE``: the run's verdict, then its research pages' archive against it.

The run is verified exactly as without ``--wacz`` (``verify_stream``); the pages the archive must hold are then read
from the same source's journal, on the run's partition, with the same content store for the reports' fetch
metadata (``research_pages``), and the archive is checked against them (``check_wacz``). The text report is the
run's, followed by the archive's section; ``--json`` adds an ``archive`` member to the run's document. The exit code
is the run's, except that an archive problem makes it a mismatch (2): the archive is evidence, and evidence that
does not match the journal is a finding. An archive that is fine cannot lift a run's verdict, and a run that is not
in the source stays not found (1), as "not found" comes before "mismatch" for ``activity verify``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from bernstein.substrate.cas import BlobStore
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.archive.check import check_wacz, open_wacz
from bernstein.verifier.archive.libs import READER, require
from bernstein.verifier.archive.pages import research_pages
from bernstein.verifier.archive.verdict import ArchiveVerdict
from bernstein.verifier.render import escape, render_text, report_document
from bernstein.verifier.report import EXIT_MISMATCH, verdict_name
from bernstein.verifier.sources import RecordSource
from bernstein.verifier.verify import verify_stream


def verify_with_archive(
    run_id: str,
    source: RecordSource,
    wacz: Path,
    out: TextIO,
    *,
    cas: BlobStore | None,
    trusted: TrustedKeys,
    records_only: bool = False,
    as_json: bool = False,
) -> int:
    """Print the run's report and the archive's verdict; return the combined exit code."""
    require(READER)
    open_wacz(wacz).close()  # an unreadable archive is a usage error before anything is verified
    header, stream = verify_stream(run_id, source, cas=cas, trusted=trusted, records_only=records_only)
    stages = list(stream)
    partition = header.chain.partition if header.chain is not None else None
    pages = research_pages(source, run_id, cas=None if records_only else cas, partition=partition) if header.found else []
    verdict = check_wacz(wacz, pages, run_id=run_id)
    if as_json:
        document, code = report_document(header, stages)
        combined = combined_code(code, verdict, found=header.found)
        document["archive"] = verdict.to_json()
        if combined != code:
            document.update(ok=False, exit_code=combined, verdict=verdict_name(header, combined))
        out.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
        return combined
    code = render_text(header, stages, out)
    for line in verdict.lines():
        out.write(escape(line) + "\n")
    return combined_code(code, verdict, found=header.found)


def combined_code(run_code: int, verdict: ArchiveVerdict, *, found: bool) -> int:
    """The run's exit code, or 2 (mismatch) when the archive does not match the journal; a run that is not in the
    source stays not found (1), as it does before a mismatch in ``activity verify``'s precedence."""
    return run_code if verdict.ok or not found else EXIT_MISMATCH
