"""The stages of an experiment, in the order `msprlab run` calls them: prepare the store,
replay it, ablate, search the weights, score them on the test window. Each returns a
result object; `experiments.reporter` prints, logs and bundles it."""
