import numpy as np

from engine.dataset import CLASS_NAMES, make_images
from engine.quality import frechet_distance


def test_dataset_is_deterministic_and_has_distinct_named_classes():
    assert len(CLASS_NAMES) >= 10 and len(set(CLASS_NAMES)) == len(CLASS_NAMES)
    a, b = make_images(3, 4, seed=0), make_images(3, 4, seed=0)
    assert a.shape == (4, 64, 64, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b)
    assert not np.array_equal(a, make_images(3, 4, seed=1))
    means = [make_images(c, 8, seed=0).reshape(-1, 3).mean(0) for c in (0, 1, 7)]
    assert min(np.abs(means[i] - means[j]).sum() for i in range(3) for j in range(i)) > 20


def test_frechet_distance_is_zero_for_equal_statistics_and_grows_with_a_shift():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6))
    mu, cov = x.mean(0), np.cov(x, rowvar=False)
    assert abs(frechet_distance(mu, cov, mu, cov)) < 1e-6
    assert abs(frechet_distance(mu + 1.0, cov, mu, cov) - 6.0) < 1e-6
