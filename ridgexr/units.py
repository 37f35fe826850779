"""The unit strings of every labelled output, in one place (UDUNITS-style spellings).

ridgexr's data have no physical unit of their own, so the data coordinates are measured in
``data_unit`` (whatever unit the training set is in); derived quantities use UDUNITS
exponent syntax (``data_unit-1`` is 1 / data_unit).  Diffusion time (OU time) is
dimensionless: ``1``, with the ``long_name`` saying which time.  Loss values are in
``loss_unit``: the weighted squared error divided by d (data_unit2 for the posterior-mean
parametrization with w = h^2 ... it depends on the weight, see docs/training.md).
"""

DATA = "data_unit"
INV_DATA = "data_unit-1"
INV_DATA2 = "data_unit-2"
DIMENSIONLESS = "1"
TIME = "1"  # OU time is dimensionless; the long_name says "diffusion time (OU)"
LOSS = "loss_unit"

__all__ = ["DATA", "INV_DATA", "INV_DATA2", "DIMENSIONLESS", "TIME", "LOSS"]
