"""The main job (`gelulab run`): the parity summary and the moons experiment (paired seeds, a verdict), into one
results folder and one report; `command` holds its command line."""
