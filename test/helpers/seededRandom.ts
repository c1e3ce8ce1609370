/**
 * The deterministic generator of integers in [0, max) that tests and benches share (xorshift32; seed 0 is taken as 1,
 * which xorshift cannot leave), so every run and every peer draws the same workload, and a test and a bench given the
 * same seed draw the same one. It lives with the test helpers because only tests and bench/ use it; the benches import
 * it from here.
 */
export function seededRandom(seed: number): (max: number) => number {
    let state = seed >>> 0 || 1;
    return (max: number) => {
        state ^= state << 13;
        state >>>= 0;
        state ^= state >>> 17;
        state ^= state << 5;
        state >>>= 0;
        return state % max;
    };
}

/** A copy of `items` in an order drawn from `random` (Fisher–Yates: one draw per position, last to second). */
export function shuffle<T>(items: readonly T[], random: (max: number) => number): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
        const j = random(i + 1);
        const [a, b] = [out[i], out[j]];
        if (a === undefined || b === undefined) throw new RangeError(`shuffle: no item at ${i} or ${j}`);
        [out[i], out[j]] = [b, a];
    }
    return out;
}
