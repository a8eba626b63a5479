"""Traits shared by several catalogue units: the limits of every x F(x) with F a CDF, GELU's root windows and the
point past which the GELU forms and SiLU equal their limits."""
from __future__ import annotations

import math

# f, f', f'' at -inf and +inf: every x F(x) with F a CDF tends to -0.0 from below on the left, to x on the right;
# f' to -0.0 and 1; f'' to -0.0 on both sides (phi(x)(2 - x^2) < 0 for |x| > sqrt 2, likewise the other forms).
X_CDF_LIMITS = {0: (-0.0, math.inf), 1: (-0.0, 1.0), 2: (-0.0, -0.0)}

# GELU's derivative roots (mpmath.findroot): f' = 0 at x = -0.75179 (exact; -0.75246 tanh, -0.75115 sigmoid),
# f'' = 0 at x = +-sqrt 2 (exact; +-1.41850 tanh, +-1.40973 sigmoid). One set of windows covers the three forms.
GELU_ROOTS = {1: ((-0.85, -0.65),), 2: ((-1.6, -1.2), (1.2, 1.6))}

# Past |x| = 1000 every GELU form and SiLU equals its limit to far below any dtype's resolution (the slowest tail,
# x sigmoid(x), is 1000 e^-1000 < 2^-1400 there), and mpmath's erfc, or the exact rounding of an e^-1e300, cannot
# take such arguments.
FAR = 1e3
