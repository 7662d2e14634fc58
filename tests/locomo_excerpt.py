"""A small LoCoMo excerpt for fast tests: the first two conversations, sessions 1-3."""

from __future__ import annotations

import re
from typing import Any


def locomo_excerpt(samples: list[dict[str, Any]], *, questions: int) -> list[dict[str, Any]]:
    """The first two conversations cut to sessions 1-3 and their first `questions` questions."""
    out = []
    for sample in samples[:2]:
        conversation = {k: v for k, v in sample["conversation"].items()
                        if not (m := re.fullmatch(r"session_(\d+)(_date_time)?", k))
                        or int(m.group(1)) <= 3}
        out.append({"sample_id": sample["sample_id"], "conversation": conversation,
                    "qa": sample["qa"][:questions]})
    return out
