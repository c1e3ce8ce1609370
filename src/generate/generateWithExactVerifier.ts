/**
 * Speculative generation with specdraft's own verification loop over node-llama-cpp's public API, driving any
 * TokenPredictor the way the library does (reset → predictTokens → pushTokens), but accepting whole draft prefixes:
 *
 *   one target step = controlledEvaluate([pending…, last, d1 … dk]) with greedy next-token output at last, d1 … dk
 *   → o0 … ok; accept d1 … da while d(j+1) = oj; the step yields o0 … oa (a accepted + 1 of the target's own);
 *   the KV cells of the rejected drafts d(a+1) … dk are erased.
 *
 * Greedy verification keeps exactly the tokens the target alone would produce, up to numerical differences between
 * a batched decode and one-token decodes (which is what the equality check after every run is there to catch).
 */
import type { ControlledEvaluateInputItem, LlamaContextSequence, Token } from "node-llama-cpp";
import type { TimedTokenPredictor } from "./TimedTokenPredictor.js";
import type { GenerationRun } from "./types.js";

const greedyNext = { generateNext: { token: true, options: { temperature: 0 } } } as const;

/**
 * Generates up to `maxTokens` greedy tokens after `prompt` on `sequence` (a sequence without a token predictor of its
 * own), taking at most `draftLength` draft tokens per step from `predictor`.
 */
export async function generateWithExactVerifier(
    sequence: LlamaContextSequence,
    predictor: TimedTokenPredictor,
    prompt: readonly number[],
    maxTokens: number,
    draftLength: number,
): Promise<GenerationRun> {
    await sequence.clearHistory();
    const model = sequence.model;
    const contextSize = sequence.contextSize;
    const waitedBefore = predictor.waitedSeconds;
    const tokens: number[] = [];
    let targetSteps = 0;
    let drafted = 0;
    let accepted = 0;
    const started = performance.now();

    predictor.updateInputTokens(prompt.slice() as Token[]);
    await predictor.reset({
        targetSequence: sequence,
        stateTokens: prompt.slice() as Token[],
        evaluateOptions: { temperature: 0 },
    });
    // tokens not yet in the target's KV cache; the last one is the one whose next token we need
    let pending: Token[] = prompt.slice() as Token[];
    try {
        while (tokens.length < maxTokens) {
            // room for pending + drafts within the context (the library likewise never lets drafts cause a context shift)
            const room = contextSize - sequence.nextTokenIndex - pending.length - 1;
            if (room < 0) break;
            const drafts = (await predictor.predictTokens()).slice(0, Math.min(draftLength, room));
            const input: ControlledEvaluateInputItem[] = pending.slice(0, -1);
            input.push([pending[pending.length - 1], greedyNext]);
            for (const draft of drafts) input.push([draft, greedyNext]);
            const outputs = await sequence.controlledEvaluate(input);
            targetSteps++;
            drafted += drafts.length;

            const base = pending.length - 1;
            const stepTokens: Token[] = [];
            for (let j = 0; j <= drafts.length; j++) {
                const next = outputs[base + j]?.next.token;
                if (next == null) throw new Error(`the target produced no token at draft position ${j}`);
                stepTokens.push(next);
                if (j === drafts.length || drafts[j] !== next) break;
            }
            const stepAccepted = stepTokens.length - 1;
            accepted += stepAccepted;
            const rejected = drafts.length - stepAccepted;
            if (rejected > 0)
                await sequence.eraseContextTokenRanges([
                    { start: sequence.nextTokenIndex - rejected, end: sequence.nextTokenIndex },
                ]);

            let finished = false;
            for (const token of stepTokens) {
                // like sequence.evaluate(): an end-of-generation token ends the output and is not part of it
                if (model.isEogToken(token) || tokens.length >= maxTokens) {
                    finished = true;
                    break;
                }
                tokens.push(token);
            }
            if (finished || tokens.length >= maxTokens) break;
            predictor.pushTokens(stepTokens);
            pending = [stepTokens[stepTokens.length - 1]];
        }
    } finally {
        await predictor.stop();
    }
    const seconds = (performance.now() - started) / 1000;
    return { tokens, seconds, targetSteps, drafted, accepted, draftSeconds: predictor.waitedSeconds - waitedBefore };
}
