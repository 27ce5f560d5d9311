"""Every table, plot and page a person reads, built from the typed results of lenpred's analyses.

- :mod:`~lenpred.report.table` the one row model (a :class:`~lenpred.report.table.Table` of text
  cells) that renders both on the console (rich) and in Markdown;
- :mod:`~lenpred.report.bench` the bench table (console, Markdown) and its plots;
- :mod:`~lenpred.report.bound` the bound analysis: its tables and ``summary.md`` (the artifact itself is
  written by :func:`lenpred.stats.make_bound`); :mod:`~lenpred.report.bound_plots` its four plots;
- :mod:`~lenpred.report.run_info` what ``lenpred info`` prints about a run directory;
- :mod:`~lenpred.report.collect` the line ``lenpred collect`` ends with;
- :mod:`~lenpred.report.demo` the tables and lines ``lenpred demo`` prints;
- :mod:`~lenpred.report.draft` what ``lenpred draft inspect`` prints about a draft head;
- :mod:`~lenpred.report.generate` the stream ``lenpred generate`` prints;
- :mod:`~lenpred.report.sim` what ``lenpred simulate`` prints and writes (the latency table, the artifact);
  :mod:`~lenpred.report.sim_plots` a simulator sweep's plots (latency CDFs, P99 vs load);
- :mod:`~lenpred.report.outlets` the OUTLETS bench's tables and plots, and the scheduling experiment's table;
- :mod:`~lenpred.report.yardstick` the scheduling yardstick's rows read back and the five arms the page
  shows per regime;
- :mod:`~lenpred.report.page` the one self-contained HTML page ``lenpred report`` writes from all of them.

Nothing here computes a figure: it formats what :mod:`lenpred.stats`, :mod:`lenpred.bench`,
:mod:`lenpred.sim` and :mod:`lenpred.data` return. The modules share verbs (``render_markdown``,
``write_plots``), so the package exports its modules, not their names: ``from lenpred.report import
bench`` then ``bench.write_plots(...)``.
"""

__all__ = ["bench", "bound", "bound_plots", "collect", "demo", "draft", "generate", "outlets", "page", "run_info", "sim", "sim_plots", "table", "yardstick"]
