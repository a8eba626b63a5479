"""What every command shares: run-time configuration from the environment (core.plumbing.config), the framework
settings record (settings), interrupts, the results folder's lock, output folders and atomic writes (output),
provenance and report files (report)."""
