"""What ``lenpred demo`` runs: :mod:`~lenpred.demo.steps` (the live run, the reference run's bound, a few
fast heads, one live OUTLETS generation) and :mod:`~lenpred.demo.report` (the reference run's report
page, its inputs made by the verbs). What they print is in :mod:`lenpred.report.demo`."""
