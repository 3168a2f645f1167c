"""A toy unlearning family, defined outside lethe and registered through the entry point group ``lethe.families``:
exact unlearning of a nearest-centroid classifier (a removal recomputes the class means without the records).

It is the worked example of docs/architecture.md, "How to add a family", which CI runs
(``tests/conformance/test_toy_family.py``): three files of its own, none of lethe's curator or console.
"""

from __future__ import annotations

from lethe.families import Capability, Family, FamilyWords

FAMILY = Family(
    name="toy-centroid",
    mechanisms=("toy-centroid",),
    estimators=("lethe_toyfam.estimator:CentroidUnlearner",),
    adapter="lethe_toyfam.adapter:CentroidAdapter",
    capabilities=frozenset({Capability.EXACT}),
    words=FamilyWords(
        title="Nearest centroids (toy)",
        updated_in_place="The class means were computed again without the record: the model is exactly the one "
                         "training without it would have produced.",
        retrained="The class means were computed again without the records.",
        observer="Anyone who sees one published version of the model.",
        not_covered="Someone who compares consecutive versions sees which class mean moved."),
    paper="exact recomputation (no approximation)",
)
