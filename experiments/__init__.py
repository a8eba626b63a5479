"""gelulab's experiments, one folder each: `parity` (every activation, backend, dtype and mode against the mpmath
reference), `moons` (ReLU vs the GELU forms on make_moons, many seeds), `swap` (swapping GELU in a pretrained
BERT encoder). They import core and backends; only gelulab.cli imports them."""
