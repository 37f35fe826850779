"""The unit strings of every labelled output, in one place (UDUNITS-style spellings).

ridgexr's data have no physical unit of their own, so the data coordinates are measured in
``data_unit`` (whatever unit the training set is in); derived quantities use UDUNITS
exponent syntax (``data_unit-1`` is 1 / data_unit).  Diffusion time (OU time) is
dimensionless: ``1``, with the ``long_name`` saying which time.  Loss values are in
``loss_unit``: the paper's loss, the time integral of the weighted squared error summed
over coordinates (its physical dimension depends on the weight, see docs/training.md).
Training time tau is in the paper's units: the gradient-flow time of that loss
(:data:`TAU_UNITS` says so in words, for the store's ``tau_units`` attribute).
"""

DATA = "data_unit"
INV_DATA = "data_unit-1"
INV_DATA2 = "data_unit-2"
DIMENSIONLESS = "1"
TIME = "1"  # OU time is dimensionless; the long_name says "diffusion time (OU)"
LOSS = "loss_unit"
TAU = "1"  # dimensionless gradient-flow time; TAU_UNITS names its convention
#: the convention of tau, recorded as the store attribute ``tau_units``
TAU_UNITS = ("paper: gradient-flow time of L(A) = int_{t_min}^{T} lambda(t) E|A psi - y|^2 dt summed over "
             "coordinates (dA/dtau = -grad L)")

__all__ = ["DATA", "INV_DATA", "INV_DATA2", "DIMENSIONLESS", "TIME", "LOSS", "TAU", "TAU_UNITS"]
