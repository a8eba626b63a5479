"""The parity experiment (`gelulab parity`): `engine` evaluates every cell (backend x impl x activation x dtype x
mode x derivative order) against the correctly rounded mpmath reference and judges it by the tolerances of
core.parity.tolerances; `command` holds the command line, the report and its plots."""
