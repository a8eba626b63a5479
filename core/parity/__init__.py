"""What a parity cell is evaluated over, checked against and held to: the named input regions
(core.parity.regions), the correctly rounded mpmath reference (reference), the tolerance tables (tolerances), the
known upstream faults of the frameworks' builtins (known_faults, whose rows live in the catalogue's units) and the CPU
dispatch levels that decide some of them (cpu_dispatch)."""
