/**
 * The rule for comparing drafts that llama.cpp computed in different decode shapes (alone or batched, a prompt
 * prefilled whole or split or reused, one token a step or with candidates): equal, or parted first where the drafter's
 * own two tokens nearly tie. llama.cpp's CPU kernels sum a row in another order by the shape of its decode (tinyBLAS
 * for two or more tokens of a sequence, ggml_vec_dot for one; docs/engine.md, "Candidates and the CPU's kernels"), and
 * which near ties flip depends on the CPU (an AVX2 EPYC parts where AVX-512 Xeons do not), so exact equality is not
 * what the engine can promise; the same choice up to such ties is, and a real error (a wrong cache, a kept candidate
 * the drafter did not choose) parts with a wide gap and, with a systematic cause, parts most drafts.
 *
 * Where both sides ran in the same shapes, compare exactly instead.
 */
import assert from "node:assert/strict";
import type { GpuChoice } from "../../src/engine/types.js";
import { NativeTarget } from "../../src/generate/NativeTarget.js";

/**
 * A logit gap this small is a near tie whatever the two paths measured: bench/lookaheadSteps.ts --classify found every
 * one of 67 differences over 6,733 held-out drafts at a gap ≤ 0.037 (2026-12-01), 8 of them where the one- and
 * multi-token decodes agree exactly but the cache's history had split the context otherwise.
 */
export const tieGap = 0.05;

/** Drafts that may part at near ties, as a share of those compared (at least one): ties are rare, bugs are not. */
export const maxPartedShare = 0.25;

/** Two drafts for the same context, the reference first. */
export interface DraftPair {
    context: readonly number[];
    expected: readonly number[];
    actual: readonly number[];
}

/** Where a pair parts and how near a tie the drafter's logits are there; `undefined` when the drafts are equal. */
export interface Parting {
    position: number;
    expected: number | undefined;
    actual: number | undefined;
    gap?: number;
    disagreement?: number;
    nearTie: boolean;
}

/**
 * Judges where `pair` parts, on `modelPath` loaded as a native target with host logits: the gap between the two tokens
 * as the drafter alone computes it (one token a decode after the context) against the largest difference between that
 * and one decode of the same tokens (NativeTarget.logitGap). A near tie: gap ≤ 2 × disagreement (each logit moved by at
 * most the disagreement), or below tieGap. Drafts of different lengths over an equal prefix are never a near tie.
 */
export async function judgeParting(
    modelPath: string,
    pair: DraftPair,
    gpu: GpuChoice = "cpu",
): Promise<Parting | undefined> {
    const { context, expected, actual } = pair;
    const length = Math.max(expected.length, actual.length);
    const position = Array.from({ length }, (_, i) => i).find((i) => expected[i] !== actual[i]);
    if (position === undefined) return undefined;
    const [a, b] = [expected[position], actual[position]];
    if (a === undefined || b === undefined) return { position, expected: a, actual: b, nearTie: false };
    const judge = await NativeTarget.load({
        modelPath,
        contextSize: context.length + length + 8,
        maxOutputs: 1,
        gpu,
        threads: 1,
        flashAttention: "off",
        backendSampling: false,
    });
    try {
        const { gap, disagreement } = await judge.logitGap(context, expected.slice(0, position), a, b);
        return {
            position,
            expected: a,
            actual: b,
            gap,
            disagreement,
            nearTie: gap <= 2 * disagreement || gap < tieGap,
        };
    } finally {
        judge.dispose();
    }
}

/**
 * Asserts every pair is equal or parts at a near tie of `modelPath`'s logits, and that at most maxPartedShare of them
 * part; returns the partings (for a test's diagnostics).
 */
export async function assertDraftsAgree(
    modelPath: string,
    pairs: readonly DraftPair[],
    what: string,
    gpu: GpuChoice = "cpu",
): Promise<Parting[]> {
    const partings: Parting[] = [];
    for (const [i, pair] of pairs.entries()) {
        const parting = await judgeParting(modelPath, pair, gpu);
        if (parting === undefined) continue;
        assert.ok(
            parting.nearTie,
            `${what}, draft ${i}: position ${parting.position}, expected ${parting.expected}, found ${parting.actual}, ` +
                `not a near tie (logit gap ${parting.gap} against a disagreement of ${parting.disagreement})`,
        );
        partings.push(parting);
    }
    const allowed = Math.max(1, Math.floor(maxPartedShare * pairs.length));
    assert.ok(partings.length <= allowed, `${what}: ${partings.length} of ${pairs.length} drafts parted at near ties`);
    return partings;
}

/** Pairs `expected[i]` with `actual[i]` over `contexts[i]`. */
export function draftPairs(
    contexts: readonly (readonly number[])[],
    expected: readonly (readonly number[])[],
    actual: readonly (readonly number[])[],
): DraftPair[] {
    assert.equal(actual.length, expected.length, "as many drafts on both sides");
    return contexts.map((context, i) => ({ context, expected: expected[i] ?? [], actual: actual[i] ?? [] }));
}

/**
 * The greedy token at each position from `from` of `tokens`, as two decodes of other shapes computed them: equal, or
 * parted at positions where `modelPath`'s two best tokens nearly tie (judged on the whole context up to the position,
 * gap ≤ 2 × disagreement or below tieGap), at most one in four positions.
 */
export async function assertArgmaxesAgree(
    modelPath: string,
    tokens: readonly number[],
    from: number,
    expected: readonly number[],
    actual: readonly number[],
    what: string,
): Promise<void> {
    assert.equal(actual.length, expected.length, `${what}: as many greedy tokens`);
    const parted = expected.flatMap((token, i) => (actual[i] === token ? [] : [i]));
    for (const i of parted) {
        const parting = await judgeParting(modelPath, {
            context: tokens.slice(0, from + i + 1),
            expected: [expected[i] ?? -1],
            actual: [actual[i] ?? -1],
        });
        assert.ok(parting?.nearTie, `${what}, position ${from + i}: ${JSON.stringify(parting)}`);
    }
    assert.ok(
        parted.length <= Math.max(1, Math.floor(maxPartedShare * expected.length)),
        `${what}: ${parted.length} parted`,
    );
}
