"""Is the replay production? The fidelity check of a replay against the end state the
artifacts record, and the search for the settings that would explain a difference.

- `production`: production's end state as a store holds it (`production_of`);
- `figures`: one replay's figures against it (`measure`, `Figures`), and the lists the
  replay says production showed (`reconstructed_lists`);
- `candidates`: the settings production may have run instead (`Candidate`);
- `stage`: the stage a run calls before any table (`fidelity_stage`, `Fidelity`: the
  figures and pass/fail that the decision and the counterfactual estimates read, also as
  `Prepared.fidelity`), and the message of the stop (`stop_message`);
- `table`: the console table.

The package's `__init__` imports nothing, so `stages.replay_tables` and the reporter can
import its modules without a cycle.
"""
