"""What measures a ranking: the IR metrics (`metrics`), the statistics of per-search frames
(`stats`), scoring arms on a candidate table (`scoring`), the stage funnel (`funnel`), an
experiment's summaries and comparisons (`summaries`) and the time-ordered splits
(`splits`). Import the modules themselves; this package imports nothing."""
