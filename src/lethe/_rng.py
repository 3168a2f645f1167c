"""The one way in for randomness: every randomized function takes ``random_state``.

(Named ``_rng`` rather than ``_random`` so that it never shadows the standard library's ``_random`` module.)
"""

from __future__ import annotations

import numbers

import numpy as np

RandomState = None | int | np.integer | np.random.Generator | np.random.SeedSequence


def check_random_state(random_state: RandomState | np.random.RandomState = None) -> np.random.Generator:
    """Turn ``random_state`` into a :class:`numpy.random.Generator`.

    Parameters
    ----------
    random_state : None, int, numpy.random.SeedSequence, numpy.random.Generator or numpy.random.RandomState
        ``None`` draws fresh entropy from the operating system; an int or ``SeedSequence`` seeds a new
        PCG64 generator (reproducible bit for bit); a ``Generator`` is returned as is (shared state);
        a legacy ``RandomState`` is used to seed a new generator (scikit-learn's checks pass these).

    Returns
    -------
    numpy.random.Generator

    Examples
    --------
    >>> g = check_random_state(0)
    >>> float(g.standard_normal()) == float(check_random_state(0).standard_normal())
    True
    """
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, bool):
        raise TypeError(f"random_state must be None, an int or a numpy Generator. Found {random_state!r}.")
    if isinstance(random_state, numbers.Integral):
        if int(random_state) < 0:
            raise ValueError(f"random_state must be a non-negative integer. Found {random_state}.")
        return np.random.default_rng(int(random_state))
    if isinstance(random_state, np.random.SeedSequence):
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1, size=4))
    raise TypeError(
        f"random_state must be None, an int, a SeedSequence or a numpy Generator. Found {type(random_state).__name__}."
    )


def copy_generator(rng: np.random.Generator) -> np.random.Generator:
    """An independent :class:`numpy.random.Generator` in ``rng``'s exact state: an operation that must leave the
    model as it was on an exception draws from the copy and adopts it only when it commits."""
    bit = type(rng.bit_generator)()
    bit.state = rng.bit_generator.state
    return np.random.Generator(bit)
