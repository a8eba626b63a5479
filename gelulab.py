"""gelulab command line."""

def main():
    raise SystemExit("not yet")
