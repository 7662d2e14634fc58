"""Parity with the ContextKit library itself: scenario files run through msprlab's engine
(`scenario_run`) and through the library (`adapter`, with the stand-ins it needs for the
embedder, the vector store, the clock and telemetry: `standins`), their outputs compared
(`scenario_diff`), and a usage period of the real library on LoCoMo left as production
artifacts with their truth (`world`). Only `adapter` and `world` need the `parity` extra."""
