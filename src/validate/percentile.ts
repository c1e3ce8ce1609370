/** Percentiles by linear interpolation between closest ranks (numpy's default), for latency figures. */

/** The `p`-th percentile (0 ≤ p ≤ 100) of `sortedValues` (ascending), or null for no values. */
export function percentile(sortedValues: readonly number[], p: number): number | null {
    if (sortedValues.length === 0) return null;
    const rank = (p / 100) * (sortedValues.length - 1);
    const below = Math.floor(rank);
    const above = Math.min(below + 1, sortedValues.length - 1);
    return sortedValues[below] + (sortedValues[above] - sortedValues[below]) * (rank - below);
}
