"""lethe: certified machine unlearning.

Train models that can forget training records, and prove it: after a removal the model is
(ε, δ)- or Rényi-indistinguishable from one that never saw the record.

Layers (see ``docs/design.md``):

* math — pure functions: :mod:`lethe.losses`, :mod:`lethe.certified.objective`,
  :mod:`lethe.certified.bounds`, :mod:`lethe.certified.noise`, :mod:`lethe.privacy`;
* mechanisms — explicit, serializable state: :mod:`lethe.certified.mechanism` (Guo et al. 2020);
* front ends — :mod:`lethe.estimators` (scikit-learn), the ``lethe`` command line, the curator service.
"""

from lethe.exceptions import BudgetExceededError, LetheError, NotFittedError

__version__ = "0.1.0"

__all__ = ["BudgetExceededError", "LetheError", "NotFittedError", "__version__"]
