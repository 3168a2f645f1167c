"""lethe: certified machine unlearning.

Train models that can forget training records, and prove it: after a removal the model is
(ε, δ)- or Rényi-indistinguishable from one that never saw the record.

Layers, imports going down only (``docs/architecture.md``: one paragraph per package, the path of a deletion
request from the HTTP API to the Newton step, where to add a loss, a solver, a mechanism adapter or a data
backend; ``tests/test_architecture.py`` checks the layers and that there is no import cycle):

* foundation — :mod:`lethe.exceptions`, :mod:`lethe.io`, :mod:`lethe.datasets`, randomness and parameter checks;
* math — pure functions: :mod:`lethe.losses`, :mod:`lethe.certified.objective`, :mod:`lethe.certified.bounds`,
  :mod:`lethe.certified.noise`, the formulas of :mod:`lethe.privacy` and :mod:`lethe.noisygd`, :mod:`lethe.audit`;
* mechanisms — explicit, serializable state: :mod:`lethe.certified.mechanism` (Guo et al. 2020),
  :mod:`lethe.noisygd.edit_stream` (Chourasia & Shah 2023, Alg. 1), :mod:`lethe.privacy.accountant`;
* front ends — :mod:`lethe.certified.estimators` and :mod:`lethe.noisygd.estimators` (scikit-learn), the deletion
  service :mod:`lethe.curator`;
* applications — :mod:`lethe.experiments` (``lethe reproduce``, ``lethe audit``) and :mod:`lethe.cli`.
"""

from lethe.exceptions import BudgetExceededError, LetheError, NotFittedError

__version__ = "0.1.0"

__all__ = ["BudgetExceededError", "LetheError", "NotFittedError", "__version__"]
