"""gelulab's backend-free core, by concern: the activation catalogue (core.activations, one module per activation),
numerics (core.numerics: formulas, kernels, mpmath reference, dtypes, regions, metrics), what a parity cell is held
to (core.parity: tolerances, known faults, CPU dispatch), the contracts backends implement (core.contracts), the
plumbing every command shares (core.plumbing: configuration, interrupts, lock, output, reports) and the statistics
over seeds (core.stats). core imports no framework and no other part of gelulab."""
