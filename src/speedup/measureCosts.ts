/**
 * The timings of the step-cost model's pieces (src/speedup/speedUpModel.ts) on this machine: the native target's cost
 * per token alone and of a verification of m tokens, what a new prompt costs it, and a drafter's cost of a draft of n
 * tokens with the context growing as a generation grows it. `specdraft speedup` and bench/generateCosts.ts both time
 * with these, so the product's figures and the benches' are the same measurement.
 */
import type { NativeTarget } from "../generate/NativeTarget.js";
import { perCall, statsSince } from "../generate/targetStats.js";
import type { NativeTargetStats } from "../generate/types.js";

/** ms since `started` (a performance.now()). */
const since = (started: number): number => performance.now() - started;

/** The middle of `values` (the upper one of an even count; undefined for none). */
function median(values: readonly number[]): number | undefined {
    return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
}

/**
 * `length` token ids spread over the first `vocab` ids above 10 (away from the lowest ids, which hold special tokens in
 * some vocabularies); `salt` gives another context that shares no prefix with this one.
 */
export function makePrompt(vocab: number, length = 256, salt = 0): number[] {
    return Array.from({ length }, (_, i) => ((i * 7919 + salt * 104_729) % vocab) + 10);
}

/** The vocabulary the measurements draw ids from: at most 4000 ids, 10 below the model's size. */
export function measuredVocab(vocabSize: number): number {
    return Math.max(1, Math.min(vocabSize - 10, 4000));
}

/**
 * ms per token of the native target alone: the difference of a generation of 8 tokens and one of 8 + 4 · repeats after
 * the same prompt, so the prompt's prefill cancels (median of 3 pairs, after one untimed generation). Null when the
 * target ended both generations as early (an end-of-generation token).
 */
export async function timeAloneNative(
    target: NativeTarget,
    prompt: readonly number[],
    repeats: number,
): Promise<number | null> {
    const time = async (n: number): Promise<{ ms: number; tokens: number }> => {
        const t = performance.now();
        const tokens = await target.generate(prompt, n);
        return { ms: since(t), tokens: tokens.length };
    };
    await time(8);
    const perToken: number[] = [];
    for (let pair = 0; pair < 3; pair++) {
        const short = await time(8);
        const long = await time(8 + repeats * 4);
        if (long.tokens > short.tokens) perToken.push((long.ms - short.ms) / (long.tokens - short.tokens));
    }
    return median(perToken) ?? null;
}

/**
 * What a new prompt costs the native target beyond its tokens, by prompt length P: F(P) = t(P, 8) − 8 · alone, the
 * median of 3 generations of 8 tokens from a fresh P-token prompt (the prefill, and the first decodes after it, which
 * rebuild the 1-token graph and warm its CUDA graph again). Keys `p<P>`.
 */
export async function timePromptFixed(
    target: NativeTarget,
    vocab: number,
    alone: number,
    promptLengths: readonly number[],
): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const length of promptLengths) {
        const fixed: number[] = [];
        for (let r = 0; r < 3; r++) {
            const prompt = Array.from({ length }, (_, i) => ((i * 7919 + r * 104_729 + length) % vocab) + 10);
            const t = performance.now();
            const tokens = await target.generate(prompt, 8);
            fixed.push(since(t) - tokens.length * alone);
        }
        out[`p${length}`] = median(fixed) ?? 0;
    }
    return out;
}

/** Which outputs a timed verification asks for: every position (`all`, the exact verifier's step) or the last only. */
export type VerifyMode = "all" | "last";

/** One verification size's timing, by mode: mean ms a call, and its native calls per call. */
export interface VerifyTiming {
    ms: Partial<Record<VerifyMode, number>>;
    perCall: Partial<Record<VerifyMode, NativeTargetStats>>;
}

/**
 * verify(m) of the native target after `prompt`: the mean ms of `repeats` calls decoding m tokens with the greedy next
 * token asked at every position (`all`) or the last only (`last`), each trimming the last call's m tokens first; and
 * each mode's native calls per call (llama_decode calls, submit / wait / read ms, graphs reused). Keys `m<m>`.
 */
export async function timeNativeVerify(
    target: NativeTarget,
    prompt: readonly number[],
    sizes: readonly number[],
    repeats: number,
    modes: readonly VerifyMode[] = ["all", "last"],
    onSize?: () => void,
): Promise<Record<string, VerifyTiming>> {
    const verifyNative: Record<string, VerifyTiming> = {};
    for (const m of sizes) {
        const timing: VerifyTiming = { ms: {}, perCall: {} };
        for (const mode of modes) {
            await target.verify(prompt, 0, prompt.length - 1);
            const before = { ...target.stats };
            let total = 0;
            for (let r = 0; r < repeats; r++) {
                const input = Array.from({ length: m }, (_, j) => 100 + j + r);
                const t = performance.now();
                const next = await target.verify(input, prompt.length, mode === "all" ? 0 : m - 1);
                total += since(t);
                if (next.length !== (mode === "all" ? m : 1)) throw new Error(`verify ${m}: ${next.length} outputs`);
            }
            timing.ms[mode] = total / repeats;
            timing.perCall[mode] = perCall(statsSince(target.stats, before), repeats);
        }
        verifyNative[`m${m}`] = timing;
        onSize?.();
    }
    return verifyNative;
}

/** A drafter under test: one draft request of n tokens for a context. */
export type DraftFn = (tokens: readonly number[], n: number) => Promise<readonly number[]>;
/** Untimed work before each timed draft of n (a target verifying n + 1 tokens, as a generation alternates them). */
export type Between = (n: number) => Promise<void>;

/** How a timed walk grows its context after each draft (see timeWalk). */
export interface WalkGrowth {
    /** How many of the last draft's tokens the simulated target accepts. */
    accepted: (draft: readonly number[]) => number;
    /** The simulated target's own next token. */
    nextToken: () => number;
}

/**
 * ms per draft of n for each n of `sizes`, the context growing as a generation grows it: + the accepted part of the
 * last draft + one token of the target's (`growth`), `repeats` timed drafts after one untimed. Calls `between(n)`
 * (untimed) and then `onRequest(n)` before each timed draft, `onSize()` after each size. Keys `n<n>`.
 */
export async function timeWalk(
    draft: DraftFn,
    prompt: readonly number[],
    sizes: readonly number[],
    repeats: number,
    growth: WalkGrowth,
    hooks: { onRequest?: (n: number) => void; between?: Between; onSize?: () => void } = {},
): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const n of sizes) {
        let tokens = prompt.slice();
        let last = await draft(tokens, n);
        let total = 0;
        for (let r = 0; r < repeats; r++) {
            tokens = [...tokens, ...last.slice(0, growth.accepted(last)), growth.nextToken()];
            await hooks.between?.(n);
            hooks.onRequest?.(n);
            const t = performance.now();
            last = await draft(tokens, n);
            total += since(t);
        }
        out[`n${n}`] = total / repeats;
        hooks.onSize?.();
    }
    return out;
}

/**
 * A walk's growth without randomness, for a target that accepts `tau − 1` draft tokens a step on average: each step
 * accepts the whole part of the running total owed so far, so the counts average out to τ − 1 (capped by the draft),
 * and the target's own tokens step through the vocabulary.
 */
export function steadyGrowth(tau: number, vocab: number): WalkGrowth {
    let owed = 0;
    let token = 0;
    return {
        accepted: (draft) => {
            owed += tau - 1;
            const accepted = Math.min(Math.floor(owed), draft.length);
            // a draft too short to pay what is owed does not carry the debt to the next
            owed = Math.min(owed - accepted, 1);
            return accepted;
        },
        nextToken: () => ((token++ * 6151) % vocab) + 10,
    };
}

/**
 * ms of the first draft (n = 1) on a new context of P tokens, by P: the drafter's prefill of a new prompt plus one
 * draft token (median of 3 contexts that share no prefix with anything the drafter saw). Keys `p<P>`.
 */
export async function timeFirstDraft(
    draft: DraftFn,
    vocab: number,
    promptLengths: readonly number[],
): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const length of promptLengths) {
        const times: number[] = [];
        for (let r = 0; r < 3; r++) {
            const tokens = Array.from({ length }, (_, i) => ((i * 6151 + r * 7727 + length * 3) % vocab) + 10);
            const t = performance.now();
            await draft(tokens, 1);
            times.push(since(t));
        }
        out[`p${length}`] = median(times) ?? 0;
    }
    return out;
}
