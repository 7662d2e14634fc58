"""msprlab.engine: the reference MSPR ranker — pure computation over an explicit state.

The verbs: `new_state` builds a state for a config, `search` runs one `Memory.search`,
`record_feedback` / `reset_feedback` / `backfill_mspr` change the feedback state, and
`tick_decay` ages the graph. Time is always an argument.
"""

from .config import Corrections, EngineConfig, RetrievalConfig
from .config_dict import config_from_dict
from .decay import tick_decay
from .edges import EdgeBuilder, archive
from .feedback_ops import backfill_mspr, record_feedback, reset_feedback
from .search import SearchError, SearchOutcome, SearchRequest, Seed, search
from .state import EngineState, new_state

__all__ = [
    "Corrections", "EdgeBuilder", "EngineConfig", "EngineState", "RetrievalConfig", "SearchError",
    "SearchOutcome", "SearchRequest", "Seed", "archive", "backfill_mspr", "config_from_dict",
    "new_state", "record_feedback", "reset_feedback", "search", "tick_decay",
]
