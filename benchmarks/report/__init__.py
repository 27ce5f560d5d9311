"""The docs generators: pages, tables and figures made from what the benchmarks wrote.

``results_page`` renders ``docs/results.md`` (``python -m benchmarks.report.results_page [--check]``)
from its template and the committed figure files, with ``results_figures`` and ``results_router``;
``policies_report``, ``yardstick_report`` and ``yardstick_pareto`` write the policy study's and the
yardstick's reports (the last one is also run on its own: ``python -m benchmarks.report.yardstick_pareto``);
``sim_real_report`` formats what ``bench_sim_real`` prints. Nothing here imports a benchmark.
"""
