"""The engine's explicit state: graph, vector-store payloads, MSPR stores, router, policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .config import EngineConfig
from .feedback import FeedbackStore
from .graph import ContextGraph
from .intent import Classifier, IntentRouter
from .roles import RolePolicy
from .stores import PayloadStore
from .success import SuccessStore

if TYPE_CHECKING:
    from .hits import HitTemplates
    from .positional import CandidateCache

Payload = dict[str, Any]


@dataclass(slots=True)
class EngineState:
    """Everything a search reads or changes. Stores exist only where the library builds them.

    `payloads` is the vector store: memory id -> the stored payload (`data`, `hash`,
    `created_at`, `updated_at`, owner ids, and every other key flat, as `Memory.add` stores).
    A `PayloadStore` (engine/stores.py): it keeps a copy of each payload put in, and logs
    which memories' payloads changed, for the positional search to re-read just those.

    `positional_search` lets BFS searches run over node positions (engine/positional.py:
    the same results, bit for bit) and make their vector hits from per-memory templates
    (engine/hits.py); off, every search takes the object path and builds each hit, as for
    measuring one against the other. `positional` and `hits` are those paths' caches.
    """

    config: EngineConfig
    graph: ContextGraph = field(default_factory=ContextGraph)
    payloads: dict[str, Payload] = field(default_factory=PayloadStore)
    feedback: FeedbackStore | None = None
    success: SuccessStore | None = None
    intent: IntentRouter | None = None
    policy: RolePolicy | None = None
    positional_search: bool = True
    positional: CandidateCache | None = None
    hits: HitTemplates | None = None


def new_state(config: EngineConfig, *, classifier: Classifier | None = None,
              policy: RolePolicy | None = None) -> EngineState:
    """A fresh state with the stores and router the library would create for `config`."""
    mspr = config.mspr
    state = EngineState(config=config, policy=policy)
    if mspr.enabled and mspr.feedback.enabled:
        state.feedback = FeedbackStore()
    if mspr.enabled and mspr.success.enabled:
        state.success = SuccessStore()
    if mspr.enabled and mspr.intent.enabled:
        state.intent = IntentRouter(mspr.intent, classifier)
    return state
