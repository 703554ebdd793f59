"""The one parameter validator every algorithm uses (lda_core.algorithms.params)."""
import numpy as np
import pytest

from lda_core.algorithms.algorithm import ALGORITHMS, algorithm_class
from lda_core.algorithms.params import check_choice, check_int, check_number, check_positive


def test_values_in_range_come_back_typed():
    assert check_int("n", np.int64(3), 1) == 3 and isinstance(check_int("n", 3, 1), int)
    assert check_int("n", 5.0, 1, 10) == 5
    assert check_positive("a", np.float32(0.5)) == 0.5
    assert check_positive("a", 0, allow_zero=True) == 0.0
    assert check_number("k", 1.0, 0.5, 1.0, lo_open=True) == 1.0
    assert check_int("seed", 2 ** 63 - 1, 0, 2 ** 63 - 1) == 2 ** 63 - 1
    assert check_choice("d", "x", ("x", "y")) == "x"


@pytest.mark.parametrize("call, msg", [
    (lambda: check_int("n_parts", 0, 1, 4096), "n_parts must be an integer in [1, 4096], got 0"),
    (lambda: check_int("n", 2.5, 1), "n must be an integer in [1, inf), got 2.5"),
    (lambda: check_int("n", True, 0), "n must be an integer in [0, inf), got True"),
    (lambda: check_positive("alpha", float("nan")),
     "alpha must be a finite number in (0, inf), got nan"),
    (lambda: check_positive("eta", "1"), "eta must be a finite number in (0, inf), got '1'"),
    (lambda: check_number("kappa", 0.5, 0.5, 1.0, lo_open=True),
     "kappa must be a finite number in (0.5, 1.0], got 0.5"),
    (lambda: check_number("r", 1, 0, 1, hi_open=True), "r must be a finite number in [0, 1), got 1"),
    (lambda: check_choice("kernel", "c", ("numba", "numpy")),
     "kernel must be one of 'numba', 'numpy', got 'c'"),
])
def test_refusals_name_parameter_range_and_value(call, msg):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == msg


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_refuses_bad_values_in_the_same_words(name):
    try:
        cls = algorithm_class(name)
    except ValueError as e:
        pytest.skip(str(e))
    with pytest.raises(ValueError, match=r"^n_topics must be an integer in \[1, .*got 0$"):
        cls(0, 10)
    with pytest.raises(ValueError, match=r"^alpha must be a finite number in \(0, inf\), got -1"):
        cls(3, 10, alpha=-1.0)
