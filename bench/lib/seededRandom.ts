/**
 * The deterministic generator of integers in [0, max) that tests and benches share (xorshift32; seed 0 is taken as 1,
 * which xorshift cannot leave), so every run and every peer draws the same workload, and a test and a bench given the
 * same seed draw the same one. A bench module (tests import it from here): nothing in src/ draws random workloads.
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
