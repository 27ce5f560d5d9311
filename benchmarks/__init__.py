"""lenpred's on-demand experiments: the figures the project prints, and the pages they write into docs/.

Run a benchmark as a module from the repository root (nothing here edits ``sys.path``)::

    python -m benchmarks.bench_yardstick --dry-run
    python -m benchmarks.report.results_page --check

Layout:

* ``bench_*.py``, ``pilot_cards.py``: the benchmarks, one experiment each (``--help`` says what it
  measures and how long it takes);
* helpers of the router's benchmarks: ``router_ab.py`` (``bench_router ab``), ``router_load.py`` (the
  load generators), ``router_report.py`` (the machine, the tables and the router's counters a run
  records), ``router_predictors_timing.py``; ``route_procs.py`` and ``route_stub.py`` start the
  servers on loopback (a stub backend, llama.cpp servers, ``lenpred route`` and ``lenpred serve``),
  for these benchmarks and for the router's tests;
* ``flags.py``: the command-line values the benchmarks share (comma-separated numbers);
* ``report/``: the docs generators, which read what the benchmarks wrote: ``docs/results.md``
  (``results_page`` with ``results_figures`` and ``results_router``) and each study's own report
  (``policies_report``, ``yardstick_report``, ``yardstick_pareto``, ``sim_real_report``).

Imports go one way: ``tests`` may import ``benchmarks`` and ``lenpred``; ``benchmarks`` imports
``lenpred`` and itself, never ``tests``; ``benchmarks.report`` imports no benchmark
(tests/test_benchmarks_imports.py checks all three). Every data format has one reader: the
yardstick's cells :mod:`lenpred.report.yardstick` (``load_cells`` for the page, ``read_cells`` with
``partial=True`` for a run's work file that a kill may have cut), the policy study's cells
``report/policies_report.read_rows``.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository: committed runs, heads and docs/ are read from here
