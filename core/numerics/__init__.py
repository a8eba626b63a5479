"""Numerics: the activations' formulas (core.numerics.formulas), float32 kernels and their fitted coefficients
(kernels, kernel_coeffs, kernel_fit), the mpmath and float64 closed forms (mp_forms, float64_forms), the dtypes and
the error metrics in ULPs. Imports no framework and nothing of core above it (kernel_fit reads the catalogue's
sigma forms to fit the coefficients the kernels use)."""
