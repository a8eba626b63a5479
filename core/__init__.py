"""gelulab's backend-free numerics (catalogue, formulas, mpmath reference, dtypes, regions, metrics, tolerances,
known faults, statistics) and the small contracts the backends implement (core.contract, core.interface,
core.training, core.encoder). core imports no framework and no other part of gelulab."""
