"""gelulab's benchmarks (`gelulab bench`): activation throughput against the machine's copy bandwidth, and one moons
training step, per backend, mode and dtype. They import core and backends only."""
