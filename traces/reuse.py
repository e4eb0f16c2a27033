"""Reuse distances: how many distinct other paths a session accesses between two accesses of a path."""

from __future__ import annotations

import numpy as np

__all__ = ["reuse_distances", "distances_from_previous"]


def _prefix_smaller(rank: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements of its group have a smaller rank.

    ``rank`` is, within each contiguous group (``group_start`` marks the first element of
    each), a permutation of 0..size-1. Groups of up to `BITSET_LIMIT` elements use 64-bit
    masks (O(m g / 64)), larger ones a wavelet pass per bit (O(m log g)).

    >>> _prefix_smaller(np.array([1, 0, 2, 0, 1]), np.array([True, False, False, True, False])).tolist()
    [0, 0, 2, 0, 1]
    """
    n_elements = len(rank)
    out = np.zeros(n_elements, dtype=np.int64)
    if n_elements == 0:
        return out
    group_first = np.flatnonzero(group_start)
    group_size = np.diff(np.append(group_first, n_elements))
    small = np.repeat(group_size <= BITSET_LIMIT, group_size)
    for in_groups, counter in ((small, _prefix_smaller_bits), (~small, _prefix_smaller_wavelet)):
        if in_groups.any():
            out[in_groups] = counter(rank[in_groups], group_start[in_groups])
    return out


BITSET_LIMIT = 1024


def _prefix_smaller_bits(rank: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """`_prefix_smaller` with 64-bit masks, for small groups."""
    # elements in blocks of 64 by index; for each block, a running bit mask in rank order of
    # the block's elements seen so far; popcount of (smaller rank) & (earlier index)
    n_elements = len(rank)
    group_first = np.flatnonzero(group_start)
    group_size = np.diff(np.append(group_first, n_elements))
    group_of = np.repeat(np.arange(len(group_first)), group_size)
    local = np.arange(n_elements) - group_first[group_of]
    block = local >> 6
    own_bit = np.left_shift(np.uint64(1), (local & 63).astype(np.uint64))
    bits_below = own_bit - np.uint64(1)
    rank_position = group_first[group_of] + rank            # position of each element in rank order
    in_rank_order = np.empty(n_elements, dtype=np.int64)
    in_rank_order[rank_position] = np.arange(n_elements)
    block_ranked, bit_ranked = block[in_rank_order], own_bit[in_rank_order]
    out = np.zeros(n_elements, dtype=np.int64)
    no_bits = np.uint64(0)
    for block_index in range(int(block.max()) + 1):
        bits = np.where(block_ranked == block_index, bit_ranked, no_bits)
        running = np.cumsum(bits, dtype=np.uint64)  # wraps across groups; differences within a group are exact
        base = (running[group_first] - bits[group_first])[group_of]
        smaller = running[rank_position] - bits[rank_position] - base
        smaller = np.where(block > block_index, smaller,
                           np.where(block == block_index, smaller & bits_below, no_bits))
        out += np.bitwise_count(smaller)
    return out


def _prefix_smaller_wavelet(rank: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """`_prefix_smaller` by a wavelet pass per bit of the rank, for large groups."""
    # each level splits every group by one bit of the rank (zeros first, order kept); a one
    # counts the zeros before it in its group: those are exactly the earlier, smaller ranks
    # whose first differing bit is this one. int32 throughout: groups are below 2**31.
    n_elements = len(rank)
    group_first = np.flatnonzero(group_start).astype(np.int32)
    group_size = np.diff(np.append(group_first, n_elements)).astype(np.int32)
    group_of = np.repeat(np.arange(len(group_first), dtype=np.int32), group_size)
    starts = group_first[group_of]      # group start of each slot of the arrangement
    ends = starts + group_size[group_of]
    slot = np.arange(n_elements, dtype=np.int32)
    element_at = slot.copy()            # element at each slot: groups contiguous, index order within
    count_at = np.zeros(n_elements, dtype=np.int32)   # count so far of the element at each slot
    rank_at = rank.astype(np.int32)     # rank of the element at each slot
    for bit in range(int(group_size.max() - 1).bit_length() - 1, -1, -1):
        ones = ((rank_at >> bit) & 1).astype(bool)
        is_zero = (~ones).view(np.int8)
        zeros_incl = np.cumsum(is_zero, dtype=np.int32)
        zeros_excl = zeros_incl - is_zero
        base = zeros_excl[starts]       # zeros before the group
        zeros_before = zeros_excl - base
        count_at += np.where(ones, zeros_before, 0).astype(np.int32)
        split = starts + (zeros_incl[ends - 1] - base)
        new_slot = np.where(ones, split + (slot - starts - zeros_before), starts + zeros_before)
        moved = np.empty((5, n_elements), dtype=np.int32)
        moved[:, new_slot] = (element_at, rank_at, count_at, np.where(ones, split, starts), np.where(ones, ends, split))
        element_at, rank_at, count_at, starts, ends = moved
    out = np.empty(n_elements, dtype=np.int64)
    out[element_at] = count_at
    return out


def reuse_distances(session_block: np.ndarray, path_code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reuse distance of every re-access, and the positions of those re-accesses.

    ``session_block`` must be non-decreasing (sessions contiguous). O(n log n).

    >>> d, at = reuse_distances(np.zeros(6, int), np.array([0, 1, 2, 1, 0, 0]))
    >>> d.tolist(), at.tolist()
    ([1, 2, 0], [3, 4, 5])
    """
    n_events = len(path_code)
    key = session_block.astype(np.int64) * (int(path_code.max(initial=0)) + 1) + path_code
    order = np.argsort(key, kind="stable")
    previous = np.full(n_events, -1, dtype=np.int64)
    same = key[order][1:] == key[order][:-1]
    previous[order[1:][same]] = order[:-1][same]
    return distances_from_previous(session_block, previous)


def distances_from_previous(session_block: np.ndarray, previous: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`reuse_distances` from each event's previous access of its path (-1 for a first access)."""
    # distinct paths in (i, j) = first accesses in (i, j) + re-accesses k in (i, j) with prev[k] < i;
    # the latter = #{re-access k < j: prev[k] < prev[j]} - #{re-access k <= i}, counted per session.
    n_events = len(previous)
    is_first = previous < 0
    at = np.flatnonzero(~is_first)
    if len(at) == 0:
        return np.zeros(0, dtype=np.int64), at
    origin = previous[at]
    firsts_so_far = np.cumsum(is_first)
    first_between = firsts_so_far[at - 1] - firsts_so_far[origin]
    session_at = session_block[at]
    group_start = np.ones(len(at), dtype=bool)
    group_start[1:] = session_at[1:] != session_at[:-1]
    # rank of each origin among this session's re-access origins: origins are distinct and stay
    # inside their session, so a running count over positions ranks them
    is_origin = np.zeros(n_events, dtype=bool)
    is_origin[origin] = True
    origin_rank = np.cumsum(is_origin) - 1
    sizes = np.diff(np.append(np.flatnonzero(group_start), len(at)))
    rank = origin_rank[origin]
    rank -= np.repeat(np.minimum.reduceat(rank, np.flatnonzero(group_start)), sizes)
    smaller = _prefix_smaller(rank, group_start)
    # re-accesses of this session at or before the origin: a running count minus those before the session
    reaccesses_so_far = np.cumsum(~is_first)
    before_session = np.repeat(reaccesses_so_far[at[group_start]] - 1, sizes)
    return first_between + smaller - (reaccesses_so_far[origin] - before_session), at
