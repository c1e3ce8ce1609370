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
 * Untimed verifications of each size before its timed ones. The first decodes of a new shape rebuild llama.cpp's graph
 * (and on a GPU capture its CUDA graph again), which a generation pays once over hundreds of steps of one shape; timed,
 * they would add their cost ÷ repeats to every call.
 */
export const verifyWarmupCalls = 3;

/**
 * verify(m) of the native target after `prompt`: the mean ms of `repeats` calls decoding m tokens with the greedy next
 * token asked at every position (`all`) or the last only (`last`), each trimming the last call's m tokens first, after
 * verifyWarmupCalls untimed ones; and each mode's native calls per call (llama_decode calls, submit / wait / read ms,
 * graphs reused). Keys `m<m>`.
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
            const call = async (r: number): Promise<number> => {
                const input = Array.from({ length: m }, (_, j) => 100 + j + r);
                const t = performance.now();
                const next = await target.verify(input, prompt.length, mode === "all" ? 0 : m - 1);
                const ms = since(t);
                if (next.length !== (mode === "all" ? m : 1)) throw new Error(`verify ${m}: ${next.length} outputs`);
                return ms;
            };
            for (let r = 0; r < verifyWarmupCalls; r++) await call(repeats + r);
            const before = { ...target.stats };
            let total = 0;
            for (let r = 0; r < repeats; r++) total += await call(r);
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
    /** Whether the walk has no token left to grow by (a conversation's end); absent: never. */
    exhausted?: () => boolean;
}

/** One context a walk drafts along: where it starts, and how it grows (a new growth for each draft size). */
export interface WalkSource {
    prompt: readonly number[];
    growth: () => WalkGrowth;
}

/**
 * ms per draft of n for each n of `sizes`, the context growing as a generation grows it: + the accepted part of the
 * last draft + one token of the target's (`growth`). The `repeats` timed drafts of a size are shared out over the
 * sources (the first ones one more), each walked from its prompt after one untimed draft (the drafter's prefill), until
 * its share is timed or its growth is exhausted. Calls `between(n)` (untimed) and then `onRequest(n)` before each
 * timed draft, `onSize()` after each size. Keys `n<n>`.
 */
export async function timeWalk(
    draft: DraftFn,
    sources: readonly WalkSource[],
    sizes: readonly number[],
    repeats: number,
    hooks: { onRequest?: (n: number) => void; between?: Between; onSize?: () => void } = {},
): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    const walked = sources.slice(0, repeats);
    for (const n of sizes) {
        let total = 0;
        let timed = 0;
        for (const [i, source] of walked.entries()) {
            const share = Math.floor(repeats / walked.length) + (i < repeats % walked.length ? 1 : 0);
            const growth = source.growth();
            let tokens = source.prompt.slice();
            let last = await draft(tokens, n);
            for (let r = 0; r < share && !growth.exhausted?.(); r++) {
                tokens = [...tokens, ...last.slice(0, growth.accepted(last)), growth.nextToken()];
                await hooks.between?.(n);
                hooks.onRequest?.(n);
                const t = performance.now();
                last = await draft(tokens, n);
                total += since(t);
                timed++;
            }
        }
        if (timed === 0) throw new Error(`no draft of ${n} timed: every walked context ended before its first`);
        out[`n${n}`] = total / timed;
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
 * A walk along a held-out conversation's continuation (the target's own greedy text), as a generation walks it: a
 * draft is accepted while it agrees with the continuation, and the continuation's next token is the target's. The
 * drafter then meets the text it will draft for (its prompt-lookup candidates find what they would in a generation),
 * where a synthetic text has no repeats to find. Exhausted at the continuation's end.
 */
export function conversationGrowth(continuation: readonly number[]): WalkGrowth {
    let at = 0;
    let accepted = 0;
    return {
        accepted: (draft) => {
            accepted = 0;
            while (
                accepted < draft.length &&
                at + accepted < continuation.length - 1 &&
                draft[accepted] === continuation[at + accepted]
            )
                accepted++;
            return accepted;
        },
        nextToken: () => {
            const token = continuation[at + accepted] ?? 0;
            at += accepted + 1;
            accepted = 0;
            return token;
        },
        exhausted: () => at >= continuation.length,
    };
}

/** What a walk needs of a held-out conversation. */
export interface HeldConversation {
    category?: string;
    promptTokens: readonly number[];
    continuationTokens: readonly number[];
}

/** Up to `count` conversations, one from each category in turn (the file's order within a category). */
export function pickConversations<C extends HeldConversation>(conversations: readonly C[], count: number): C[] {
    const byCategory = new Map<string, C[]>();
    for (const conversation of conversations) {
        const key = conversation.category ?? "";
        byCategory.set(key, [...(byCategory.get(key) ?? []), conversation]);
    }
    const queues = [...byCategory.values()];
    const picked: C[] = [];
    for (let round = 0; picked.length < count && queues.some((queue) => queue.length > round); round++)
        for (const queue of queues) {
            const conversation = queue[round];
            if (conversation !== undefined && picked.length < count) picked.push(conversation);
        }
    return picked;
}

/**
 * The walk source of the i-th picked conversation: it starts a fraction of the way into its continuation (the golden
 * ratio's fractions, spread evenly over [0, ½) from one conversation to the next), so that the timed drafts fall all
 * along the outputs, not only after prompts.
 */
export function conversationSource(conversation: HeldConversation, i: number): WalkSource {
    const continuation = conversation.continuationTokens;
    const start = Math.floor(continuation.length * (((i * 0.618_034) % 1) / 2));
    return {
        prompt: [...conversation.promptTokens, ...continuation.slice(0, start)],
        growth: () => conversationGrowth(continuation.slice(start)),
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
