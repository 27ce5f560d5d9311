"""Every table, plot and page a person reads, built from the typed results of lenpred's analyses.

- :mod:`~lenpred.report.table` the one row model (a :class:`~lenpred.report.table.Table` of text
  cells) that renders both on the console (rich) and in Markdown;
- :mod:`~lenpred.report.bound` the bound analysis: its tables, ``summary.md`` and the artifact
  directory ``lenpred bound`` writes; :mod:`~lenpred.report.bound_plots` its four plots;
- :mod:`~lenpred.report.run_info` what ``lenpred info`` prints about a run directory.

Nothing here computes a figure: it formats what :mod:`lenpred.stats` and :mod:`lenpred.data` return.
"""
