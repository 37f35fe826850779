"""The unit strings of every labelled output, in one place (UDUNITS-style spellings).

ridgexr's data have no physical unit of their own, so the data coordinates are measured in
``data_unit`` (whatever unit the training set is in); derived quantities use UDUNITS
exponent syntax (``data_unit-1`` is 1 / data_unit).  Diffusion time (OU time) is
dimensionless: ``1``, with the ``long_name`` saying which time.  Loss values are in
``loss_unit``: the paper's loss, the time integral of the weighted squared error summed
over coordinates (its physical dimension depends on the weight, see docs/training.md).
Training time tau is in the paper's units: the gradient-flow time of that loss
(:data:`TAU_UNITS` says so in words, for the store's ``tau_units`` attribute).

CF conventions: every units string here but the four below is one UDUNITS (and
``cf_xarray.units``) reads.  ``data_unit``, ``data_unit-1``, ``data_unit-2`` and ``loss_unit``
are not, on purpose: ridgexr does not know the unit of a user's training data, and writing
``1`` would claim the quantities are dimensionless and hide how they scale with the data (a
distance scales with it, ``ridge_residual`` with its inverse); :data:`NOT_UDUNITS` lists them
with that reason, and docs/schema.md says so.  Label and index coordinates (``schedule``,
``model``, ``target``, ``width``, ``sample``, ``step``, ``dim``, ``train``, ...) have no units
(:data:`LABEL`): they are names and counts, not quantities (xarray would title plots
"schedule = h [1]").  The time coordinate ``t`` has ``standard_name: time`` and ``axis: T`` (CF tools
find the time axis) with units ``1``: OU time is dimensionless, and a unit of time (``s``) would
make xarray decode it as a timedelta.
"""

DATA = "data_unit"
INV_DATA = "data_unit-1"
INV_DATA2 = "data_unit-2"
DIMENSIONLESS = "1"
TIME = "1"  # OU time is dimensionless; the long_name says "diffusion time (OU)"
LOSS = "loss_unit"
FEATURE2 = "feature_unit2"  # squared units of a classifier's features (a Frechet distance)
TAU = "1"  # dimensionless gradient-flow time; TAU_UNITS names its convention
LABEL = None  # label and index coordinates carry no units attribute
#: the units strings that UDUNITS does not read, and why they are used anyway
NOT_UDUNITS = {DATA: "the unit of the user's training data, unknown to ridgexr",
               INV_DATA: "one over the training data's unit", INV_DATA2: "one over its square",
               LOSS: "the paper's loss: the time integral of the weighted squared error, whose dimension depends "
                     "on the weight schedule (docs/training.md)",
               FEATURE2: "the square of a classifier's (dimensionless, arbitrary-scale) penultimate features"}
#: the convention of tau, recorded as the store attribute ``tau_units``
TAU_UNITS = ("paper: gradient-flow time of L(A) = int_{t_min}^{T} lambda(t) E|A psi - y|^2 dt summed over "
             "coordinates (dA/dtau = -grad L)")

__all__ = ["DATA", "INV_DATA", "INV_DATA2", "DIMENSIONLESS", "TIME", "LOSS", "TAU", "TAU_UNITS", "LABEL", "NOT_UDUNITS",
           "FEATURE2"]
