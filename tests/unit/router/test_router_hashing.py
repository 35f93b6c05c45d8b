import pytest

from router.hashing import ROOT_SEED, hash_blocks, tokens_to_bytes


def test_one_hash_per_full_block_and_partial_tail_ignored():
    assert len(hash_blocks(list(range(35)), 16)) == 2
    assert hash_blocks(list(range(15)), 16) == []
    assert hash_blocks([], 16) == []


def test_hash_is_deterministic_and_names_the_whole_prefix():
    a = list(range(64))
    b = list(range(64))
    b[0] = 999  # differs only in the first block
    ha, hb = hash_blocks(a, 16), hash_blocks(b, 16)
    assert ha == hash_blocks(list(a), 16)
    # Same tokens in blocks 1..3 but a different first block: every hash differs (chaining).
    assert all(x != y for x, y in zip(ha, hb))


def test_shared_prefix_gives_shared_leading_hashes():
    a = list(range(48)) + [1] * 16
    b = list(range(48)) + [2] * 16
    ha, hb = hash_blocks(a, 16), hash_blocks(b, 16)
    assert ha[:3] == hb[:3] and ha[3] != hb[3]


def test_continuing_from_a_parent_equals_hashing_the_whole_sequence():
    tokens = list(range(100, 164))
    whole = hash_blocks(tokens, 16)
    tail = hash_blocks(tokens[32:], 16, parent=whole[1])
    assert tail == whole[2:]


def test_root_seed_changes_everything():
    tokens = list(range(32))
    assert hash_blocks(tokens, 16, ROOT_SEED) != hash_blocks(tokens, 16, 12345)


def test_block_size_matters():
    tokens = list(range(64))
    assert hash_blocks(tokens, 16)[1] != hash_blocks(tokens, 32)[0]


def test_token_encoding_is_little_endian_uint32():
    assert tokens_to_bytes([1, 256]) == b"\x01\x00\x00\x00\x00\x01\x00\x00"
    with pytest.raises(OverflowError):
        tokens_to_bytes([2**32])
    with pytest.raises(OverflowError):
        tokens_to_bytes([-1])


def test_invalid_block_size():
    with pytest.raises(ValueError):
        hash_blocks([1, 2], 0)
