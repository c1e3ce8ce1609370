/**
 * Greedy generation through node-llama-cpp, the three ways bench/libraryVerifiers.ts compares: the target alone
 * (`sequence.evaluate()`, one token per decode), specdraft's verification loop over a node-llama-cpp sequence
 * (llamaSequenceTarget: the `exact-node-llama-cpp` verifier) and the library's own speculative path
 * (generateWithLibraryVerifier: the `node-llama-cpp` verifier); each gives a GenerationRun.
 */
import type { ControlledEvaluateInputItem, LlamaContextSequence, Token } from "node-llama-cpp";
import type { TimedTokenPredictor } from "../../src/generate/generateGreedily.js";
import type { SpeculativeTarget } from "../../src/generate/generateSpeculatively.js";
import type { GenerationRun } from "../../src/generate/types.js";

// The baseline: the target generating greedily by itself, one token per decode, through node-llama-cpp.

/**
 * Generates up to `maxTokens` greedy tokens after `prompt` on `sequence` (a sequence without a token predictor).
 * The sequence's history is cleared first, so every run evaluates its prompt from scratch.
 */
export async function generateAlone(
    sequence: LlamaContextSequence,
    prompt: readonly number[],
    maxTokens: number,
): Promise<GenerationRun> {
    await sequence.clearHistory();
    const { tokens, seconds } = await evaluateGreedily(sequence, prompt, maxTokens);
    return { tokens, seconds, targetSteps: tokens.length, drafted: 0, accepted: 0, draftSeconds: 0 };
}

/**
 * Up to `maxTokens` greedy tokens after `prompt` through `sequence.evaluate()` (with the sequence's own token
 * predictor, if it has one), and the seconds they took, prompt evaluation included.
 */
async function evaluateGreedily(
    sequence: LlamaContextSequence,
    prompt: readonly number[],
    maxTokens: number,
): Promise<{ tokens: number[]; seconds: number }> {
    const tokens: number[] = [];
    const started = performance.now();
    for await (const token of sequence.evaluate(prompt.slice() as Token[], { temperature: 0 })) {
        tokens.push(token);
        if (tokens.length >= maxTokens) break;
    }
    return { tokens, seconds: (performance.now() - started) / 1000 };
}

// The exact-node-llama-cpp verifier's target: a node-llama-cpp sequence driven by generateSpeculatively's loop.

const greedyNext = { generateNext: { token: true, options: { temperature: 0 } } } as const;

/**
 * `sequence` (one without a token predictor of its own) as the verification loop's target: verify() erases its cache
 * past `keep` (all of it at 0) and scores the tokens in one `controlledEvaluate`, a greedy next token asked at each of
 * tokens[outputFrom..]. node-llama-cpp copies every asked position's logits to the host and samples each in its own
 * call; the native target (NativeTarget) takes the argmax inside llama.cpp's graph instead.
 */
export function llamaSequenceTarget(sequence: LlamaContextSequence): SpeculativeTarget {
    const model = sequence.model;
    return {
        contextSize: sequence.contextSize,
        maxOutputs: sequence.context.batchSize,
        isEog: (token) => model.isEogToken(token as Token),
        async verify(tokens, keep, outputFrom) {
            const cached = sequence.nextTokenIndex;
            if (keep > cached) throw new RangeError(`verify: keep ${keep}: expected 0 ≤ keep ≤ ${cached}`);
            if (keep === 0) await sequence.clearHistory();
            else if (keep < cached) await sequence.eraseContextTokenRanges([{ start: keep, end: cached }]);
            const input: ControlledEvaluateInputItem[] = tokens.map((token, i) =>
                i < outputFrom ? (token as Token) : [token as Token, greedyNext],
            );
            const outputs = await sequence.controlledEvaluate(input);
            return tokens.slice(outputFrom).map((_, j) => {
                const token = outputs[outputFrom + j]?.next.token;
                if (token == null) throw new Error(`the target produced no token at position ${outputFrom + j}`);
                return token;
            });
        },
    };
}

// Speculative generation through node-llama-cpp's own path: `sequence.evaluate()` on a sequence created with a
// `tokenPredictor`; the library asks the predictor for drafts, verifies them in its decode and keeps the matches.
//
// Caveat (node-llama-cpp 3.21.1, also on its main branch): `_speculativeEvaluate` compares a draft token at batch
// position i ≥ 2 with `validatedTokens.at(-1)`, an array it never fills, so only the first draft token of each step
// can be accepted and τ ≤ 2 for any drafter (bench/README.md). `specdraft generate` (generateSpeculatively over
// NativeTarget) is the one to measure drafters with.
// Its first decode also holds the prompt together with the first drafts, so the prompt's KV is not the target alone's
// (the library decides its decodes: generate neither changes them nor can replay them).

/**
 * Generates up to `maxTokens` greedy tokens after `prompt` on `sequence`, whose token predictor is `predictor`.
 * Counts come from the sequence's `tokenPredictions` (deltas over this run): each used prediction saved one decode.
 */
export async function generateWithLibraryVerifier(
    sequence: LlamaContextSequence,
    predictor: TimedTokenPredictor,
    prompt: readonly number[],
    maxTokens: number,
): Promise<GenerationRun> {
    await sequence.clearHistory();
    predictor.updateInputTokens(prompt.slice() as Token[]);
    const before = { ...sequence.tokenPredictions };
    const waitedBefore = predictor.waitedSeconds;
    const { tokens, seconds } = await evaluateGreedily(sequence, prompt, maxTokens);
    const after = sequence.tokenPredictions;
    const used = after.used - before.used;
    return {
        tokens,
        seconds,
        targetSteps: tokens.length - used,
        drafted: after.validated - before.validated + (after.refuted - before.refuted),
        accepted: used,
        draftSeconds: predictor.waitedSeconds - waitedBefore,
    };
}
