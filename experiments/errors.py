"""The error a user can cause in an experiment: raised with a message that says which file,
key or value is wrong and what to do. The command line turns it into exit status 2
(`exits.py`); any other exception reaching it is a bug (exit 3)."""


import re


class ExperimentError(ValueError):
    """A definition, or data it points at, that cannot run: what is wrong, where, the fix."""


def redact_url(url: str) -> str:
    """A URL as an error message may print it: without its password."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)
