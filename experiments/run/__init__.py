"""The main job (`gelulab run`): the parity summary and the moons experiment with a few seeds, into one
results folder and one report; `command` holds its command line."""
