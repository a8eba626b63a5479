"""The identify command (`gelulab identify A [B]`): `expression` reads A and B, restricted expressions of the
frameworks' functions (or Python with --allow-python); `command` holds the command line over gelulab.api.probe,
which finds the variant a callable computes."""
