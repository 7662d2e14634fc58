"""Embedders production may run, reached from msprlab: an importable callable
(`module:function`) and an OpenAI-compatible HTTP endpoint (`/v1/embeddings`), beside the
shipped ones of `msprlab.datasets.embed`; `query_embedder` resolves a `--query-embedder`
value to one of them.

The artifacts of a ContextKit deployment keep the memories' vectors but not the queries':
a replay finds production's seeds only when the queries are embedded as production did.
"""

from .imported import CallableEmbedder
from .openai_http import HttpEmbedder
from .options import EmbedderError, EmbedderOptions
from .spec import query_embedder, shipped_embedder

__all__ = ["CallableEmbedder", "EmbedderError", "EmbedderOptions", "HttpEmbedder",
           "query_embedder", "shipped_embedder"]
