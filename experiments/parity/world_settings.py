"""What a ContextKit world is made of (`world.py`): its size, its users, production's
configuration and the embedder, checked on construction; every field is in world.json.

- **Size**: the first K LoCoMo conversations (one user each), their first S sessions (the
  memories), N searches.
- **Users**: a position-based click model (rank r examined with probability r^-eta; a
  memory of grade g attracts with (1 - noise) * g + noise / 2) and a verdict model (a
  click on a memory of grade g is helpful with probability p_helpful[g]); `rank_share` of
  the verdicts record the rank shown (`metadata={"rank": R}`, 1-based), as an application
  may.
- **How much MSPR truly helps**: on `preference_share` of the questions (drawn once, per
  seed) a user's true preference follows their past helpful verdicts: a memory they judged
  helpful for the question is relevant to it from then on, besides its LoCoMo evidence, so
  recording feedback truly helps there; on the others only the evidence is relevant, and a
  boost from a noisy helpful verdict is wrong.
- **Production** (`Production`): decay on or off (and its half-life), the feedback deltas
  and the MSPR weights the library ran with; `engine_toml()` is the [engine] block a
  definition must hold to replay it.
- **Embedder**: `wordllama` (msprlab ships it) or `module:function`, the application's own
  (msprlab does not ship it; `tests/fixtures/application/app_embedding.py` is one: put its
  folder on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from msprlab.datasets.clicks import PositionBasedModel, VerdictModel

__all__ = ["LOCOMO_CONVERSATIONS", "MAX_GRADE", "Production", "WorldSettings",
           "add_settings_arguments", "settings_from_args"]

LOCOMO_CONVERSATIONS = 10
# The shown ranking's grades are LoCoMo's binary evidence: 0 or 1.
MAX_GRADE = 1


def _number(owner: str, name: str, value: Any, low: float, high: float) -> None:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not low <= value <= high):
        raise ValueError(f"{owner}{name.replace('_', '-')} must be a number in "
                         f"[{low:g}, {high:g}], got {value!r}")


@dataclass(frozen=True, kw_only=True)
class Production:
    """The ranking settings production ran (the rest are the library's defaults): decay,
    the feedback deltas and cap, and the three MSPR weights. MSPR records feedback,
    success and access counts either way."""

    decay: bool = False
    half_life_days: float = 30.0
    boost_delta: float = 0.15
    penalty_delta: float = 0.10
    max_boost_per_memory: float = 0.60
    delta_personal: float = 0.0
    epsilon_frequency: float = 0.0
    zeta_success: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.decay, bool):
            raise ValueError(f"--decay must be on or off, got {self.decay!r}")
        _number("--", "half_life_days", self.half_life_days, 1e-3, 1e6)
        for name in ("boost_delta", "penalty_delta", "max_boost_per_memory", "delta_personal",
                     "epsilon_frequency", "zeta_success"):
            _number("--", name, getattr(self, name), 0.0, 1.0)

    def library_config(self) -> dict[str, Any]:
        """The parts of `Memory.from_config`'s dict these settings set."""
        return {
            "context_graph": {
                "decay": {"enabled": self.decay, "half_life_days": self.half_life_days},
                "retrieval": {"delta_personal": self.delta_personal,
                              "epsilon_frequency": self.epsilon_frequency,
                              "zeta_success": self.zeta_success}},
            "mspr": {"feedback": {"boost_delta": self.boost_delta,
                                  "penalty_delta": self.penalty_delta,
                                  "max_boost_per_memory": self.max_boost_per_memory}},
        }

    def engine_toml(self) -> str:
        """The [engine] block of an experiment definition that replays this production."""
        decay = (f"{{ enabled = true, half_life_days = {self.half_life_days!r} }}"
                 if self.decay else "{ enabled = false }")
        return (
            "[engine.context_graph]\n"
            "enabled = true\n"
            f"decay = {decay}\n"
            f"retrieval = {{ delta_personal = {self.delta_personal!r}, epsilon_frequency = "
            f"{self.epsilon_frequency!r}, zeta_success = {self.zeta_success!r} }}\n\n"
            "[engine.mspr]\n"
            "enabled = true\n"
            f"feedback = {{ enabled = true, boost_delta = {self.boost_delta!r}, penalty_delta = "
            f"{self.penalty_delta!r}, max_boost_per_memory = {self.max_boost_per_memory!r} }}\n"
            "success = { enabled = true }\n"
            "frequency = { enabled = true }\n")


@dataclass(frozen=True, kw_only=True)
class WorldSettings:
    """What the world is made of (module docstring); every field is in world.json."""

    conversations: int = 2
    sessions: int | None = None  # the first S sessions of each conversation; None: all
    searches: int = 1000
    seed: int = 0
    no_query_share: float = 0.03
    limit: int = 10
    zipf_s: float = 1.1
    mean_gap_seconds: float = 3600.0
    click_model: PositionBasedModel = field(
        default_factory=lambda: PositionBasedModel(eta=1.0, noise=0.1, max_grade=MAX_GRADE))
    verdict_model: VerdictModel = field(
        default_factory=lambda: VerdictModel(p_helpful=(0.1, 0.95), judge_rate=1.0))
    rank_share: float = 0.0
    preference_share: float = 0.0
    production: Production = field(default_factory=Production)
    embedder: str = "wordllama"

    def __post_init__(self) -> None:
        def whole(name: str, low: int, high: int | None = None) -> None:
            value = getattr(self, name)
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (
                high is None or value <= high)
            span = f"{low}..{high}" if high is not None else f">= {low}"
            if not ok:
                raise ValueError(f"--{name.replace('_', '-')} must be a whole number "
                                 f"{span}, got {value!r}")

        whole("conversations", 1, LOCOMO_CONVERSATIONS)
        if self.sessions is not None:
            whole("sessions", 1)
        whole("searches", 1)
        whole("seed", 0)
        whole("limit", 1, 100)
        for name in ("no_query_share", "rank_share", "preference_share"):
            _number("--", name, getattr(self, name), 0.0, 1.0)
        for name in ("zipf_s", "mean_gap_seconds"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.mean_gap_seconds <= 0:
            raise ValueError(f"mean_gap_seconds must be > 0, got {self.mean_gap_seconds!r}")
        if self.click_model.max_grade != MAX_GRADE or self.verdict_model.max_grade != MAX_GRADE:
            raise ValueError("the click and verdict models must read grades 0..1 (LoCoMo's "
                             "evidence is binary)")
        if not isinstance(self.embedder, str) or not self.embedder:
            raise ValueError(f"--embedder must name an embedder, got {self.embedder!r}")

    def examination(self) -> list[float]:
        """The true probability that rank r = 1..limit is examined (the position-based
        model's r^-eta): what a position-bias estimate should recover."""
        return [float(r ** -self.click_model.eta) for r in range(1, self.limit + 1)]

    def as_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items()
               if k not in ("click_model", "verdict_model", "production")}
        out["click_model"] = {"name": type(self.click_model).__name__,
                              **asdict(self.click_model)}
        out["verdict_model"] = {"name": type(self.verdict_model).__name__,
                                **asdict(self.verdict_model)}
        out["production"] = asdict(self.production)
        return out


# ---- the command line ----------------------------------------------------------------------
def _on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")
    return text == "on"


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """Every setting of a world as a flag (defaults: `WorldSettings`, `Production`)."""
    w, p = WorldSettings(), Production()
    size = parser.add_argument_group("size")
    size.add_argument("--conversations", type=int, default=w.conversations, metavar="K",
                      help="how many LoCoMo conversations (the first K of locomo10, one "
                           "user each; 1..10, default %(default)s)")
    size.add_argument("--sessions", type=int, default=None, metavar="S",
                      help="only the first S sessions of each conversation, and only the "
                           "questions whose evidence lies in them (default: all sessions)")
    size.add_argument("--searches", type=int, default=w.searches, metavar="N",
                      help="searches in the usage period (default %(default)s: about 400 "
                           "verdicts on two whole conversations)")
    size.add_argument("--seed", type=int, default=w.seed, metavar="S",
                      help="seeds the question stream, the clicks and verdicts, which "
                           "verdicts lack a query or record their rank, and the preference "
                           "questions (default %(default)s)")
    users = parser.add_argument_group("users")
    users.add_argument("--eta", type=float, default=w.click_model.eta, metavar="ETA",
                       help="position bias: rank r is examined with probability r^-ETA "
                            "(default %(default)s)")
    users.add_argument("--noise", type=float, default=w.click_model.noise, metavar="P",
                       help="click noise: an examined memory attracts with (1 - P) * grade "
                            "+ P / 2 (default %(default)s)")
    users.add_argument("--p-helpful", type=float, nargs=2, default=list(w.verdict_model.p_helpful),
                       metavar=("P0", "P1"),
                       help="a judged click on a memory of grade 0 / 1 is helpful with these "
                            "probabilities (default %(default)s; equal values make verdicts "
                            "that say nothing of the truth)")
    users.add_argument("--no-query-share", type=float, default=w.no_query_share, metavar="F",
                       help="share of verdicts recorded without query= (default %(default)s)")
    users.add_argument("--rank-share", type=float, default=w.rank_share, metavar="F",
                       help="share of verdicts recording the rank shown, metadata={\"rank\": "
                            "R} (default %(default)s)")
    users.add_argument("--preference-share", type=float, default=w.preference_share,
                       metavar="F",
                       help="share of questions whose truth follows the user's past helpful "
                            "verdicts, so feedback truly helps there (default %(default)s)")
    prod = parser.add_argument_group("production's configuration")
    prod.add_argument("--decay", type=_on_off, default=p.decay, metavar="on|off",
                      help="graph decay (default off)")
    prod.add_argument("--half-life", type=float, default=p.half_life_days, metavar="DAYS",
                      help="decay's half-life in days (default %(default)s)")
    prod.add_argument("--boost", type=float, default=p.boost_delta, metavar="D",
                      help="mspr.feedback.boost_delta (default %(default)s)")
    prod.add_argument("--penalty", type=float, default=p.penalty_delta, metavar="D",
                      help="mspr.feedback.penalty_delta (default %(default)s)")
    prod.add_argument("--cap", type=float, default=p.max_boost_per_memory, metavar="D",
                      help="mspr.feedback.max_boost_per_memory (default %(default)s)")
    for flag, name in (("--delta", "delta_personal"), ("--epsilon", "epsilon_frequency"),
                       ("--zeta", "zeta_success")):
        prod.add_argument(flag, type=float, default=getattr(p, name), metavar="W",
                          help=f"context_graph.retrieval.{name} (default %(default)s)")
    parser.add_argument("--embedder", default=w.embedder, metavar="SPEC",
                        help="wordllama (msprlab ships it) or the application's own "
                             "module:function (its folder on PYTHONPATH), e.g. "
                             "app_embedding:embed from tests/fixtures/application "
                             "(default %(default)s)")


def settings_from_args(args: argparse.Namespace) -> WorldSettings:
    """The settings the flags of `add_settings_arguments` give (ValueError naming a bad one)."""
    defaults = WorldSettings()
    try:
        click = PositionBasedModel(eta=args.eta, noise=args.noise, max_grade=MAX_GRADE)
    except ValueError as exc:
        raise ValueError(f"--eta / --noise: {exc}") from None
    try:
        verdicts = VerdictModel(p_helpful=tuple(args.p_helpful),
                                judge_rate=defaults.verdict_model.judge_rate)
    except ValueError as exc:
        raise ValueError(f"--p-helpful: {exc}") from None
    production = Production(
        decay=args.decay, half_life_days=args.half_life, boost_delta=args.boost,
        penalty_delta=args.penalty, max_boost_per_memory=args.cap,
        delta_personal=args.delta, epsilon_frequency=args.epsilon, zeta_success=args.zeta)
    return WorldSettings(
        conversations=args.conversations, sessions=args.sessions, searches=args.searches,
        seed=args.seed, no_query_share=args.no_query_share, click_model=click,
        verdict_model=verdicts, rank_share=args.rank_share,
        preference_share=args.preference_share, production=production,
        embedder=args.embedder)
