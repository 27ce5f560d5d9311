"""The report page: one self-contained HTML file built from the results the other verbs wrote.

- :mod:`~lenpred.report.page.inputs` opens and checks the inputs (bound, bench, OUTLETS bench,
  simulator outputs, policy rows) against the run's card;
- :mod:`~lenpred.report.page.sections` and :mod:`~lenpred.report.page.serving` turn each typed
  result into a :class:`~lenpred.report.page.model.Section` (text, verdicts, tables, figures);
- :mod:`~lenpred.report.page.render` lays the sections out with ``templates/report.html.j2`` and
  writes the page atomically;
"""

from lenpred.report.page.inputs import ReportInputs
from lenpred.report.page.render import ReportResult, write_report

__all__ = ["ReportInputs", "ReportResult", "write_report"]
