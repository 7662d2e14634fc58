"""Counterfactual evaluation on verdict labels (issue 40): the position bias of a verdict
log, estimated, and each arm's ranking quality estimated against it.

- `click_model`: the position-based click model fitted by EM, with the truncation a verdict
  log has (a search nobody clicked is not in it);
- `position_bias`: the examination curve with bootstrap CIs over questions;
- `logged`: a verdict-labelled table's logged searches as impressions;
- `offpolicy`: IPS and SNIPS on logged rewards (checked on the Open Bandit Dataset);
- `estimators`: IPS and SNIPS nDCG@k of each arm, per question and overall, with CIs.
"""
