"""Run the parity suite under every CPU dispatch level this machine can force (`make test-dispatch`).

Frameworks pick their CPU kernels by the processor's features, so a user's machine may run torch at ATen level
"avx2" where this one runs "avx512". For each selected backend (GELULAB_BACKEND, else all installed) and each level
below the native one that the processor supports (core.parity.cpu_dispatch.host_levels), this starts
`pytest tests/test_parity.py` in a fresh process with the level forced (ATEN_CPU_CAPABILITY,
XLA_FLAGS=--xla_cpu_max_isa, NPY_DISABLE_CPU_FEATURES), checks that the process really runs at that level, and
prints one line per run. Exit status: 0 when every run passed, else 1. Extra arguments go to pytest (e.g.
`-m "not slow"` for eager cells only).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from gelulab.backends import capabilities, installed_backends, requested_backends
from gelulab.core.parity.cpu_dispatch import forced_env, host_levels

ROOT = Path(__file__).resolve().parent.parent
_LEVEL = ("import sys; from gelulab.backends import get_backend; "
          "sys.stdout.write(str(get_backend(sys.argv[1]).cpu_dispatch()))")


def runs(backends) -> list[tuple[str, str, dict]]:
    """(backend, level, environment) for every level of each backend's dispatcher that this processor supports
    below its native one (`make test` runs the native level)."""
    out = []
    for name in backends:
        dispatcher = capabilities(name).dispatcher
        for level in host_levels(dispatcher)[:-1]:
            out.append((name, level, {**os.environ, **forced_env(dispatcher, level), "GELULAB_BACKEND": name}))
    return out


def main(argv: list[str]) -> int:
    backends = requested_backends() or installed_backends()
    failed = []
    for name, level, env in runs(backends):
        got = subprocess.run([sys.executable, "-c", _LEVEL, name], env=env, capture_output=True, text=True,
                             cwd=ROOT, check=False).stdout.strip()
        if got != level:
            print(f"{name} at {level}: the forced process runs at {got!r}; not tested", flush=True)
            failed.append((name, level))
            continue
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_parity.py",
                            *argv], env=env, capture_output=True, text=True, cwd=ROOT, check=False)
        tail = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"{name} at {level}: {tail} ({time.perf_counter() - t0:.0f} s)", flush=True)
        if r.returncode != 0:
            print(r.stdout[-4000:], r.stderr[-2000:], sep="\n", flush=True)
            failed.append((name, level))
    if failed:
        print(f"failed: {', '.join(f'{n} at {lv}' for n, lv in failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
