"""The fixed-card benchmark: metrics relative to the oracle bound on a run's test split."""

from lenpred.bench.evaluate import BenchResult, BenchRow, BoundRow, ProtocolCard, evaluate
from lenpred.bench.scoring import PointMetrics, point_metrics
from lenpred.stats.bootstrap import Bootstrap

__all__ = ["BenchResult", "BenchRow", "BoundRow", "Bootstrap", "PointMetrics", "ProtocolCard", "evaluate",
           "point_metrics"]
