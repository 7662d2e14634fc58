"""The ranking settings beside the weights, and replays that score several of them at once:
which settings touch the search and which the recorded state (`settings`), one walk over a
timeline scoring several search settings at each search (`walk`), and the candidate tables
of a whole-configuration search, cached by exactly the settings that reach them (`tables`)."""
