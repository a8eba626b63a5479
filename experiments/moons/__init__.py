"""The moons experiment (`gelulab moons`): `config` (MoonsConfig, data, splits, the matched regime's initial weights,
order and Adam tables), `study` (the plan, resumable training per backend, the command line), `report` (statistics
and Markdown) and `plots`. Each backend's trainer is backends/<name>/moons.py."""
