/**
 * The benches' deterministic generator of integers in [0, max) (xorshift32; seed 0 is taken as 1, which xorshift
 * cannot leave), so every run and every peer draws the same workload.
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
