"""The as-run checks' statistics (:mod:`privaudit.accountants.trace.as_run`) on simulated draws: sound under the claim's
own sampling (the shared binomial check of tests/soundness.py, false alarm 1e-6), a planted unsound variant
rejected by that same check, and the bugs they exist for (shuffled batches, a larger rate) far below any level."""

import numpy as np
import pytest
from scipy import stats

from privaudit.accountants.trace.as_run import (code_findings, count_dispersion_p, fixed_overlap_p, poisson_overlap_p,
                                          repeat_p, repeated)
from privaudit.accountants.trace.trace import TrainingTrace
from soundness import critical

N, Q, T, RUNS, LEVEL = 300, 0.1, 8, 2000, 0.05


def poisson_runs(rng, runs=RUNS, n=N, q=Q, steps=T):
    """(runs, steps, n) inclusion under Poisson sampling."""
    return rng.random((runs, steps, n)) < q


def disjoint_overlaps(incl):
    return (incl[:, 0::2][:, :incl.shape[1] // 2] & incl[:, 1::2]).sum(axis=(1, 2))


def shuffled_runs(runs, n=N, batch=int(N * Q), steps=T, seed=0):
    rng = np.random.default_rng(seed)
    out = np.zeros((runs, steps, n), dtype=bool)
    per_epoch = n // batch
    for r in range(runs):
        for e in range(0, steps, per_epoch):
            perm = rng.permutation(n)
            for k in range(min(per_epoch, steps - e)):
                out[r, e + k, perm[k * batch:(k + 1) * batch]] = True
    return out


def test_the_poisson_tests_are_sound_under_the_claims_sampling():
    incl = poisson_runs(np.random.default_rng(0))
    overlap = [poisson_overlap_p(int(o), T // 2, N, Q) for o in disjoint_overlaps(incl)]
    counts = [count_dispersion_p(c, T, Q)[1] for c in incl.sum(axis=1)]
    limit = critical(RUNS, LEVEL)
    assert sum(p < LEVEL for p in overlap) < limit and sum(p < LEVEL for p in counts) < limit
    assert 0.01 < np.mean(np.array(overlap) < LEVEL) <= LEVEL  # the exact law: close to the level, not above


def test_an_unsound_overlap_law_is_rejected_by_the_same_check():
    """Overlapping pairs (0, 1), (1, 2), ... read as Binomial(n (T - 1), q^2): positively correlated terms, a
    variance above the binomial's, and too many rejections of correct draws."""
    incl = poisson_runs(np.random.default_rng(1), q=0.3)
    chained = (incl[:, :-1] & incl[:, 1:]).sum(axis=(1, 2))
    p = [poisson_overlap_p(int(o), T - 1, N, 0.3) for o in chained]
    assert sum(x < LEVEL for x in p) >= critical(RUNS, LEVEL)


def test_shuffled_batches_under_a_poisson_claim_are_far_below_any_level():
    """Disjoint batches within an epoch: every pair's overlap is 0 (p = 2 (1 - q^2)^(n P), exactly), every count
    equal (Maurer's lower tail)."""
    incl = shuffled_runs(20)
    assert set(disjoint_overlaps(incl)) == {0}
    assert poisson_overlap_p(0, T // 2, N, Q) == pytest.approx(2 * (1 - Q * Q) ** (N * T // 2), rel=1e-9)
    assert max(count_dispersion_p(c, T, Q)[1] for c in incl.sum(axis=1)) < 1e-9


def test_the_without_replacement_law_is_the_hypergeometric_sum():
    rng = np.random.default_rng(2)
    b, pairs = 30, 4
    draws = rng.hypergeometric(b, N - b, b, size=(RUNS, pairs)).sum(axis=1)
    p = np.array([fixed_overlap_p(int(s), pairs, N, b) for s in draws])
    assert np.mean(p < LEVEL) <= LEVEL and sum(p < LEVEL) < critical(RUNS, LEVEL)
    assert fixed_overlap_p(0, pairs, N, b) < 1e-5  # disjoint batches (shuffled) within an epoch


def test_counts_see_a_larger_rate_and_repeats_are_bounded():
    incl = poisson_runs(np.random.default_rng(3), runs=5, q=2 * Q)
    assert max(count_dispersion_p(c, T, Q)[1] for c in incl.sum(axis=1)) < 1e-3
    assert repeat_p(T, N, Q, None) < 1e-20 and repeat_p(T, N, None, 30) < 1e-20
    assert repeated(["a", "b", None, None, "a"]) == (1, 5) and repeated(["a", None, None]) is None


def trace(**columns):
    base = {"batch_size": [10.0] * 3, "noise_std": [1.0] * 3, "sensitivity": [1.0] * 3, "multiplier": [1.0] * 3,
            "units": [10.0] * 3, "noise_norm": [None] * 3}
    return TrainingTrace("example", "poisson", 100, 0.1, 10, 5, 1.0, {**base, **columns},
                         replays=columns.pop("replays", None))


@pytest.mark.parametrize("columns, field", [
    ({"unit_norm_max": [1.0, 2.0, 1.0]}, "unit_norm"),
    ({"normalizer": [10.0, 12.0, 10.0]}, "normalizer"),
    ({"noise_digest": ["x", "y", "x"]}, "noise"),
    ({"tensor_noise_digests": [["a", "b"], ["c", "a"], ["d", "e"]]}, "noise"),
    ({"tensor_noise_digests": [["a", None], ["c", "b"], ["d", "b"]]}, "noise"),
])
def test_the_exact_code_checks_name_their_field(columns, field):
    found = code_findings(trace(**columns))
    assert [m.field for m in found] == [field]
    assert found[0].step in (2, 3)


def test_replays_within_the_sensitivity_and_slack_pass_and_beyond_it_fail():
    ok = {"step": 1, "neighbour": "add", "distance": 1.0001, "sensitivity": 1.0, "slack": 1e-3}
    bad = {**ok, "distance": 1.01}
    assert code_findings(TrainingTrace("example", "poisson", 100, 0.1, 10, 5, 1.0, trace().columns,
                                       replays=[ok])) == []
    found = code_findings(TrainingTrace("example", "poisson", 100, 0.1, 10, 5, 1.0, trace().columns, replays=[bad]))
    assert [m.field for m in found] == ["replay"] and "add neighbour" in found[0].message
    assert code_findings(trace(unit_norm_max=[1.0, 1.0 + 1e-7, 0.5], normalizer=[8.0] * 3,
                               noise_digest=["a", "b", "c"],
                               tensor_noise_digests=[["a", None], ["b", None], ["c", "d"]])) == []


def test_tensor_digests_name_both_cells_and_whether_the_reuse_is_across_tensors_or_steps():
    within = code_findings(trace(tensor_noise_digests=[["a", "b", "a"], ["c", "d", "e"], ["f", "g", "h"]]))
    assert "tensor 2 at step 1 began with the same noise as tensor 0 at step 1" in within[0].message
    assert "across tensors" in within[0].message
    across = code_findings(trace(tensor_noise_digests=[["a", "b"], ["c", "d"], ["e", "b"]]))
    assert "tensor 1 at step 3 began with the same noise as tensor 1 at step 1" in across[0].message
    assert "across steps" in across[0].message and across[0].step == 3


def test_a_tensor_without_noise_is_named_at_a_noised_step_and_ignored_at_a_noiseless_one():
    found = code_findings(trace(tensor_noise_digests=[["a", "b"], ["c", "0"], ["d", "0"]]))
    assert [m.field for m in found] == ["noise"] and found[0].step == 2
    assert "step 2: tensor 1 drew no noise" in found[0].message
    noiseless = trace(tensor_noise_digests=[["0", "0"], ["0", "0"], ["0", "0"]], noise_std=[0.0] * 3)
    assert code_findings(noiseless) == []  # a step that claims no noise draws zeros on every tensor, repeated


def test_tensor_noise_digests_see_the_leading_values_of_each_tensor():
    import torch
    from privaudit.defenses.dp.release.as_run import PREFIX, tensor_noise_digests

    noise = torch.randn(40, generator=torch.Generator().manual_seed(0))
    digests = tensor_noise_digests(noise, [16, 4, 20])
    assert digests[1] is None and len({digests[0], digests[2]}) == 2 and len(digests[0]) == 12
    repeated = torch.cat([noise[:16], noise[:4], noise[:16], noise[16:20]])
    first, _, third = tensor_noise_digests(repeated, [16, 4, 20])
    assert first == third == digests[0]  # same first PREFIX values, whatever follows
    assert tensor_noise_digests(noise, [PREFIX - 1, 41 - PREFIX])[0] is None
    silent = noise.clone()
    silent[16:36] = 0
    assert tensor_noise_digests(silent, [16, 20, 4]) == [digests[0], "0", None]
