"""The error a user can cause in an experiment: raised with a message that says which file,
key or value is wrong and what to do. The command line turns it into exit status 2
(`exits.py`); any other exception reaching it is a bug (exit 3)."""


class ExperimentError(ValueError):
    """A definition, or data it points at, that cannot run: what is wrong, where, the fix."""
