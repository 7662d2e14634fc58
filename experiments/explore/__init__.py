"""The per-query explorer: each arm's top 10 of every test search with the parts of each
score, where the relevant memories it does not show were lost, and how much two arms'
lists overlap. `lists` computes it once per run (the reporter bundles it), `questions`
reads it back for `msprlab explain` and the report's page, `overlap` holds Jaccard@k and
rank-biased overlap."""
