import random
from collections import Counter

import pytest

from dynamo_lite.protocol import WorkerId
from router.cost import pick_lowest, sample_softmax, score_candidates, softmax_weights
from router.load import LoadView

W = WorkerId("w")
IDLE = LoadView(0.0, 0.0, 0)


def score_candidate(w, overlap_blocks, load, prompt_tokens, block_size, overlap_weight):
    return score_candidates([w], {w: overlap_blocks}, [load], prompt_tokens, block_size, overlap_weight)[0]


def test_formula_terms():
    s = score_candidate(W, overlap_blocks=2, load=LoadView(32.0, 10.0, 1), prompt_tokens=100, block_size=16,
                        overlap_weight=2.0)
    # uncached = 100 - 32 = 68; prefill = (32 + 68) / 16; decode = 10 + ceil(100 / 16)
    assert s.prefill_blocks == pytest.approx(100 / 16)
    assert s.decode_blocks == 17
    assert s.cost == pytest.approx(2.0 * 100 / 16 + 17)


def test_fully_cached_prompt_has_no_prefill_of_its_own():
    s = score_candidate(W, 4, IDLE, prompt_tokens=64, block_size=16, overlap_weight=1.0)
    assert s.prefill_blocks == 0 and s.cost == 4


def test_prompt_shorter_than_a_block():
    s = score_candidate(W, 0, IDLE, prompt_tokens=5, block_size=16, overlap_weight=1.0)
    assert s.prefill_blocks == pytest.approx(5 / 16) and s.decode_blocks == 1


def test_empty_prompt_costs_only_existing_load():
    s = score_candidate(W, 0, LoadView(0.0, 3.0, 1), prompt_tokens=0, block_size=16, overlap_weight=1.0)
    assert s.cost == 3


def test_zero_overlap_weight_ignores_cache_and_prefill_queue():
    cached = score_candidate(W, 8, LoadView(1000.0, 5.0, 1), 128, 16, 0.0)
    cold = score_candidate(W, 0, LoadView(0.0, 5.0, 1), 128, 16, 0.0)
    assert cached.cost == cold.cost == 13


def test_overlap_bounded_by_prompt():
    s = score_candidate(W, 10, IDLE, prompt_tokens=64, block_size=16, overlap_weight=1.0)
    assert s.prefill_blocks == 0


def test_lowest_wins_and_ties_go_to_the_smaller_index_then_random():
    rng = random.Random(0)
    assert pick_lowest([3.0, 1.0, 2.0], [0, 0, 0].__getitem__, rng) == 1
    assert pick_lowest([1.0, 1.0, 2.0], [50, 7, 0].__getitem__, rng) == 1
    picks = Counter(pick_lowest([1.0, 1.0, 1.0, 5.0], [3, 3, 3, 0].__getitem__, rng) for _ in range(600))
    assert set(picks) == {0, 1, 2} and min(picks.values()) > 120
    with pytest.raises(ValueError):
        pick_lowest([], [].__getitem__, rng)


def test_softmax_weights():
    w = softmax_weights([1.0, 2.0, 3.0], temperature=1.0)
    assert sum(w) == pytest.approx(1.0) and w[0] > w[1] > w[2]
    assert softmax_weights([5.0, 5.0], 0.1) == [0.5, 0.5]
    # normalised: scaling all costs does not change the distribution
    assert softmax_weights([10.0, 20.0, 30.0], 0.5) == pytest.approx(softmax_weights([1.0, 2.0, 3.0], 0.5))
    cold = softmax_weights([0.0, 1.0], temperature=1e-4)
    assert cold[0] == pytest.approx(1.0)
    hot = softmax_weights([0.0, 1.0], temperature=1e4)
    assert hot[0] == pytest.approx(0.5, abs=1e-3)
    with pytest.raises(ValueError):
        softmax_weights([1.0], 0.0)


def test_sampling_follows_the_weights():
    rng = random.Random(1)
    counts = Counter(sample_softmax([0.0, 1.0], 1.0, rng) for _ in range(4000))
    expected0 = softmax_weights([0.0, 1.0], 1.0)[0]  # 1 / (1 + e^-1) ~ 0.73
    assert counts[0] / 4000 == pytest.approx(expected0, abs=0.03)


def test_scores_keep_candidate_order_and_default_overlap_to_zero():
    a, b = WorkerId("a"), WorkerId("b")
    scores = score_candidates([b, a], {a: 2}, [IDLE, IDLE], 64, 16, 1.0)
    assert [s.worker_id for s in scores] == [b, a]
    assert [s.overlap_blocks for s in scores] == [0, 2]
    assert scores[1].cost < scores[0].cost
