/**
 * The near-tie check's rule, on a recorded replayer: which calls it replays for each run (the target alone's, and the
 * speculative run's up to the last call with an output at the differing position), the speculative cache checked
 * against the target alone's context, and a near tie exactly when both replays reproduce their run's token (an end
 * token where a run ended). That replays give the logits a run computed is NativeTarget.test.ts's.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { aloneCalls } from "../../src/generate/NativeTarget.js";
import { type LogitsReplayer, replayDifference } from "../../src/generate/replayDifference.js";
import type { TargetCall } from "../../src/generate/types.js";

const end = 0;
const vocabulary = 10;

/** Answers the replays with `alone`'s logits, then `speculative`'s, and records what it was asked. */
function replayer(alone: Record<number, number>, speculative: Record<number, number>) {
    const asked: { calls: readonly TargetCall[]; row?: number }[] = [];
    const answers = [alone, speculative];
    const target: LogitsReplayer = {
        isEog: (token) => token === end,
        replayLogits: async (calls, row) => {
            asked.push({ calls, row });
            const logits = new Float32Array(vocabulary);
            for (const [token, logit] of Object.entries(answers[asked.length - 1] ?? {})) logits[Number(token)] = logit;
            return logits;
        },
    };
    return { target, asked };
}

const prompt = [1, 2, 3];
// the prompt alone (its output: 4), a step whose draft 9 was rejected (output 5), then a step from token 5 whose first
// output is the token at position 2 (row 4, which the rejected draft's row had been first)
const calls: TargetCall[] = [
    { keep: 0, tokens: prompt, outputFrom: 2 },
    { keep: 3, tokens: [4, 9, 9], outputFrom: 0 },
    { keep: 4, tokens: [5, 7, 7], outputFrom: 0 },
];

test("both runs replayed up to the difference; a near tie when the replays choose the runs' tokens", async () => {
    const { target, asked } = replayer({ 6: 2.0, 8: 1.75, 3: 0.5 }, { 6: 2.0, 8: 2.25, 3: 1.0 });
    const replay = await replayDifference(target, prompt, [4, 5, 6, 7], calls, { position: 2, expected: 6, actual: 8 });
    assert.deepEqual(asked, [
        { calls: aloneCalls(prompt, [4, 5]), row: undefined },
        { calls, row: 0 },
    ]);
    assert.deepEqual(replay, {
        logitGap: 0.25,
        speculativeLogitGap: 0.25,
        kernelDisagreement: 0.5,
        replayedTokens: { alone: 6, speculative: 8 },
        nearTie: true,
    });
});

test("a replay that does not choose its run's token: not a near tie", async () => {
    const { target } = replayer({ 6: 2.0, 8: 1.0 }, { 6: 2.0, 8: 1.5 });
    const replay = await replayDifference(target, prompt, [4, 5, 6], calls, { position: 2, expected: 6, actual: 8 });
    assert.deepEqual(replay.replayedTokens, { alone: 6, speculative: 6 });
    assert.equal(replay.speculativeLogitGap, -0.5);
    assert.equal(replay.nearTie, false);
});

test("a run that ended: its replay must choose an end-of-generation token", async () => {
    const ended = await replayDifference(
        replayer({ [end]: 3.0, 8: 2.5 }, { [end]: 2.5, 8: 3.0 }).target,
        prompt,
        [4, 5],
        calls,
        {
            position: 2,
            expected: null,
            actual: 8,
        },
    );
    assert.deepEqual(ended, {
        logitGap: 0.5,
        speculativeLogitGap: 0.5,
        kernelDisagreement: 0.5,
        replayedTokens: { alone: end, speculative: 8 },
        nearTie: true,
    });
    const notEnded = await replayDifference(replayer({ 6: 3.0 }, { 8: 3.0 }).target, prompt, [4, 5], calls, {
        position: 2,
        expected: null,
        actual: 8,
    });
    assert.equal(notEnded.nearTie, false);
});

test("a speculative cache that held another token before the difference: not a tie, nothing replayed", async () => {
    const { target, asked } = replayer({}, {});
    const wrong: TargetCall[] = [calls[0] as TargetCall, { keep: 3, tokens: [4, 7, 9], outputFrom: 0 }];
    const replay = await replayDifference(target, prompt, [4, 5, 6], wrong, { position: 2, expected: 6, actual: 8 });
    assert.deepEqual(replay, { otherContext: { position: 4, expected: 5, found: 7 }, nearTie: false });
    assert.equal(asked.length, 0);
});

test("a speculative run that asked for no token there (it stopped before): not a tie", async () => {
    const replay = await replayDifference(replayer({}, {}).target, prompt, [4, 5, 6, 7, 6], calls.slice(0, 2), {
        position: 4,
        expected: 6,
        actual: null,
    });
    assert.deepEqual(replay, { nearTie: false });
});
