/**
 * The near-tie check of `specdraft generate`: where a speculative run's output parts from the target alone's, decode
 * again what each run decoded up to there, in the same shapes, and compare the logits the two really computed.
 *
 * llama.cpp's numbers depend on how tokens are split into decodes (and which rows are outputs): the target alone decodes
 * the prompt, then one token a decode; a speculative run decodes the prompt, then each step's [pending, d1 … dk]. At
 * the first differing position P (the token after context position prompt + P − 1):
 * - the speculative run's calls up to the one that produced P must have left exactly the target alone's context in
 *   the cache (the prompt and the P agreed tokens); otherwise speculation decoded something else: not a tie;
 * - the target alone's calls (aloneCalls) and the speculative run's calls are replayed, each in a fresh context with
 *   the target's settings, giving the logits each side computed at P: L_alone and L_speculative;
 * - a near tie ⇔ the replays reproduce both runs' tokens there: argmax L_alone = expected, argmax L_speculative =
 *   actual (an end-of-generation token where that run ended). Then the two tokens lie within the two sides'
 *   disagreement D = max over the vocabulary |L_alone − L_speculative|: logitGap + speculativeLogitGap ≤ 2·D, since
 *   each side's choice is the other's flipped by logits that moved by at most D; the summary names both gaps and D.
 */
import { aloneCalls, largestDifference, type NativeTarget } from "./NativeTarget.js";
import type { PromptResult, TargetCall } from "./types.js";

type FirstDifference = NonNullable<PromptResult["firstDifference"]>;

/** What the replay adds to a first difference (its figures, and whether it is a near tie). */
export type DifferenceReplay = Pick<
    FirstDifference,
    "logitGap" | "speculativeLogitGap" | "kernelDisagreement" | "replayedTokens" | "otherContext" | "nearTie"
>;

/** What the replay needs of a target: its logits for a run's calls, and its end-of-generation tokens. */
export type LogitsReplayer = Pick<NativeTarget, "replayLogits" | "isEog">;

/**
 * Replays the target alone's run (`prompt`, then `alone`) and the speculative run (`calls`) up to `difference` on
 * `target` and judges it (the rule in this file's header).
 */
export async function replayDifference(
    target: LogitsReplayer,
    prompt: readonly number[],
    alone: readonly number[],
    calls: readonly TargetCall[],
    difference: Pick<FirstDifference, "position" | "expected" | "actual">,
): Promise<DifferenceReplay> {
    const { position, expected, actual } = difference;
    // the context position whose logits chose the token at `position`
    const row = prompt.length + position - 1;
    // the last call with an output there (a rejected draft's row is decoded again by a later call)
    let producing = -1;
    for (const [i, call] of calls.entries())
        if (call.keep + call.outputFrom <= row && row < call.keep + (call.outputTo ?? call.tokens.length))
            producing = i;
    const producer = calls[producing];
    // the speculative run asked for no token there (it stopped before): nothing to replay
    if (producer === undefined) return { nearTie: false };
    const context = [...prompt, ...alone.slice(0, position)];
    const cache: number[] = [];
    for (const call of calls.slice(0, producing + 1)) {
        cache.length = call.keep;
        cache.push(...call.tokens);
    }
    const other = context.findIndex((token, i) => cache[i] !== token);
    if (other >= 0)
        return {
            otherContext: { position: other, expected: context[other] ?? 0, found: cache[other] ?? 0 },
            nearTie: false,
        };

    const logitsAlone = await target.replayLogits(aloneCalls(prompt, alone.slice(0, position)));
    const logitsSpeculative = await target.replayLogits(calls.slice(0, producing + 1), row - producer.keep);
    const replayedTokens = { alone: argmax(logitsAlone), speculative: argmax(logitsSpeculative) };
    const a = expected ?? replayedTokens.alone;
    const b = actual ?? replayedTokens.speculative;
    const reproduces = (token: number | null, replayed: number) =>
        token === null ? target.isEog(replayed) : token === replayed;
    return {
        logitGap: at(logitsAlone, a) - at(logitsAlone, b),
        speculativeLogitGap: at(logitsSpeculative, b) - at(logitsSpeculative, a),
        kernelDisagreement: largestDifference(logitsAlone, logitsSpeculative),
        replayedTokens,
        nearTie: reproduces(expected, replayedTokens.alone) && reproduces(actual, replayedTokens.speculative),
    };
}

/** The first index of the largest logit, as llama.cpp's greedy sampler picks. */
function argmax(logits: Float32Array): number {
    let best = 0;
    for (let v = 1; v < logits.length; v++) if (at(logits, v) > at(logits, best)) best = v;
    return best;
}

function at(logits: Float32Array, token: number): number {
    const value = logits[token];
    if (value === undefined) throw new RangeError(`token ${token} is outside the ${logits.length}-token vocabulary`);
    return value;
}
