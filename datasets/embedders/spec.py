"""`--query-embedder SPEC`: a shipped embedder's name, `module:function`, or an HTTP URL.

- `wordllama` (a name in `msprlab.datasets.embed.EMBEDDERS` that needs no fitting);
- `package.module:function`: a callable importable from `sys.path` (put its folder on
  `PYTHONPATH`) mapping a list of texts to one vector each (`imported.CallableEmbedder`);
- `http://HOST:PORT/v1` or `https://.../v1/embeddings`: an OpenAI-compatible embeddings
  endpoint, with the model name, the name of the environment variable holding the key,
  the batch size and the timeout in `EmbedderOptions` (`openai_http.HttpEmbedder`).

Every failure is an `EmbedderError` with one plain message naming the flag and the fix.
"""

from __future__ import annotations

from typing import Any

from .imported import CallableEmbedder
from .openai_http import HttpEmbedder
from .options import EmbedderError, EmbedderOptions

__all__ = ["EmbedderError", "EmbedderOptions", "query_embedder", "shipped_embedder"]


def is_url(spec: str) -> bool:
    return spec.startswith(("http://", "https://"))


def shipped_embedder(name: str, *, flag: str = "--embedder", also: str = "") -> Any:
    """The shipped embedder `name` (`msprlab.datasets.embed.EMBEDDERS`), or EmbedderError
    naming the flag, the usable names and `also` (other accepted forms)."""
    from msprlab.datasets.embed import EMBEDDERS, make_embedder
    try:
        return make_embedder(name)
    except ImportError as exc:
        raise EmbedderError(f"{flag} {name}: {exc}") from None
    except (ValueError, TypeError):
        usable = ", ".join(n for n in sorted(EMBEDDERS) if n != "sentence-transformers")
        raise EmbedderError(f"{flag} {name!r}: not an embedder ingest can build by name; "
                            f"use one of {usable}{also}") from None


def query_embedder(spec: str, options: EmbedderOptions | None = None, *,
                   flag: str = "--query-embedder") -> Any:
    """The embedder `spec` names (module docstring), built and probed once, so a wrong
    name, an unreachable endpoint, a refused key or a function that does not embed fails
    here, before any data is read."""
    options = options or EmbedderOptions()
    if is_url(spec):
        return HttpEmbedder(spec, options, flag=flag)
    if ":" in spec:
        return CallableEmbedder(spec, flag=flag)
    return shipped_embedder(spec, flag=flag, also=", a callable as module:function, or an "
                                                  "OpenAI-compatible endpoint as "
                                                  "http://HOST:PORT/v1")
