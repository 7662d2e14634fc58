"""Sources: each turns a shipped or user-supplied dataset into a `Dataset` of schema frames."""

from .locomo import load_locomo, locomo_anomalies
from .scifact import bm25_ndcg10, load_scifact

__all__ = ["bm25_ndcg10", "load_locomo", "load_scifact", "locomo_anomalies"]
