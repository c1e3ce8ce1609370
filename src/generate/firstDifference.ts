/** Where two token sequences first differ. */

/** The first index where `expected` and `actual` differ (a missing token counts as `null`), or `undefined` if equal. */
export function firstDifference(
    expected: readonly number[],
    actual: readonly number[]
): { position: number; expected: number | null; actual: number | null } | undefined {
    const length = Math.max(expected.length, actual.length);
    for (let i = 0; i < length; i++)
        if (expected[i] !== actual[i]) return { position: i, expected: expected[i] ?? null, actual: actual[i] ?? null };
    return undefined;
}
