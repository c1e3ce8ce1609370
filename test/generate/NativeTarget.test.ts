/**
 * The native target on the CPU with the tiny fixtures: one verify call is one llama_decode and gives the greedy token
 * of every position asked for; the argmax in llama.cpp's graph equals the argmax over the logits and node-llama-cpp's
 * greedy token at each position; the target alone equals node-llama-cpp's; bad calls are refused with what was
 * expected.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { ControlledEvaluateInputItem, Llama, Token } from "node-llama-cpp";
import { generateAlone } from "../../bench/libraryVerifiers/nodeLlamaCppGeneration.js";
import { aloneCalls, NativeTarget, type NativeTargetOptions } from "../../src/generate/NativeTarget.js";
import type { NativeTargetHandle } from "../../src/generate/nativeTargetAddon.js";
import type { TargetCall } from "../../src/generate/types.js";
import { defined } from "../helpers/defined.js";
import { assertArgmaxesAgree, assertDraftsAgree } from "../helpers/nearTies.js";
import { cpuLlama, targetModel, testThreads } from "./testModels.js";

const contextSize = 256;
const maxOutputs = 9;
const prompt = [785, 3974, 1876, 3835, 3420, 916, 279, 1567, 562, 13, 785, 3974];

let llama: Llama;
before(async () => {
    // node-llama-cpp first: the native addon then finds llama.cpp's CPU backend registered (they share its libraries)
    llama = await cpuLlama();
});
after(async () => {
    await llama.dispose();
});

async function openTarget(
    t: { after(fn: () => void): void },
    options: Partial<NativeTargetOptions> = {},
): Promise<NativeTarget> {
    const target = await NativeTarget.load({
        modelPath: targetModel,
        contextSize,
        maxOutputs,
        gpu: "cpu",
        threads: testThreads,
        ...options,
    });
    t.after(() => target.dispose());
    return target;
}

/** The first index of the largest logit. */
function argmax(logits: Float32Array): number {
    let best = 0;
    for (let v = 1; v < logits.length; v++) if ((logits[v] ?? 0) > (logits[best] ?? 0)) best = v;
    return best;
}

/** node-llama-cpp's greedy next token after each of `tokens` (from an empty sequence), one controlledEvaluate. */
async function libraryGreedy(tokens: readonly number[]): Promise<number[]> {
    const model = await llama.loadModel({ modelPath: targetModel });
    const context = await model.createContext({ contextSize, sequences: 1, threads: testThreads });
    try {
        const greedy = { generateNext: { token: true, options: { temperature: 0 } } } as const;
        const input: ControlledEvaluateInputItem[] = tokens.map((token) => [token as Token, greedy]);
        const outputs = await context.getSequence().controlledEvaluate(input);
        return outputs.map((output) => output?.next?.token as number);
    } finally {
        await context.dispose();
        await model.dispose();
    }
}

test("info: vocabulary, context, outputs, end-of-generation ids, CPU", async (t) => {
    const target = await openTarget(t);
    assert.equal(target.vocabSize, 4003);
    assert.ok(target.contextSize >= contextSize);
    assert.equal(target.maxOutputs, maxOutputs);
    assert.equal(target.gpuDevice, "");
    assert.ok(target.eogIds.size >= 1, "the fixture's vocabulary has an end-of-text token");
    assert.equal(target.cached, 0);
});

test("one verify call = one llama_decode, with the greedy token of every position asked for", async (t) => {
    const target = await openTarget(t);
    const drafts = [10, 20, 30, 40, 50, 60, 70, 80];
    const expected = await libraryGreedy([...prompt, ...drafts]);

    // the prompt's last token and 8 drafts: 9 outputs from one decode
    const all = await target.verify([...prompt, ...drafts], 0, prompt.length - 1);
    assert.deepEqual(all, expected.slice(prompt.length - 1));
    assert.equal(target.stats.decodes, 1);
    assert.equal(target.stats.tokens, prompt.length + drafts.length);
    assert.equal(target.cached, prompt.length + drafts.length);

    // keep the prompt and 3 drafts (the rest was "rejected"), verify the next step's 1 + 4 tokens: one more decode
    const keep = prompt.length + 3;
    const step = [11, 21, 31, 41, 51];
    const next = await target.verify(step, keep, 0);
    // the cache trimmed and decoded again against one decode of it all: other shapes, so equal up to near ties
    const whole = [...prompt, ...drafts.slice(0, 3), ...step];
    const library = (await libraryGreedy(whole)).slice(keep);
    await assertArgmaxesAgree(targetModel, whole, keep, library, next, "a verify after a trimmed cache");
    assert.equal(target.stats.decodes, 2);
    assert.equal(target.cached, keep + step.length);

    // only the last position asked: one output
    assert.deepEqual(await target.verify(step, keep, step.length - 1), next.slice(-1));
});

test("the argmax in llama.cpp's graph (backend sampling) equals the host's argmax over the logits", async (t) => {
    const inGraph = await openTarget(t, { backendSampling: true });
    const onHost = await openTarget(t, { backendSampling: false });
    for (let r = 0; r < 4; r++) {
        const tokens = [...prompt, ...Array.from({ length: 8 }, (_, j) => 100 + 37 * j + r)];
        const outputFrom = tokens.length - maxOutputs;
        assert.deepEqual(await inGraph.verify(tokens, 0, outputFrom), await onHost.verify(tokens, 0, outputFrom));
    }
});

test("the target alone equals node-llama-cpp's greedy generation; a prompt longer than a batch is split", async (t) => {
    const target = await openTarget(t, { batchSize: 8 });
    const model = await llama.loadModel({ modelPath: targetModel });
    const context = await model.createContext({ contextSize, sequences: 1, threads: testThreads });
    t.after(async () => {
        await context.dispose();
        await model.dispose();
    });
    const reference = await generateAlone(context.getSequence(), prompt, 40);
    const before = target.stats.decodes;
    const tokens = await target.generate(prompt, 40);
    // the prompt split over two decodes against one: equal up to near ties of the target's logits
    await assertDraftsAgree(
        targetModel,
        [{ context: prompt, expected: reference.tokens, actual: tokens }],
        "split prompt",
    );
    // the 12-token prompt in batches of 8 (2 decodes), then one decode per token but the last
    assert.equal(target.stats.decodes - before, 2 + tokens.length - 1);
    assert.equal(target.cached, prompt.length + tokens.length - 1);
});

test("logitGap: the target alone's logit difference of two tokens at a position, as node-llama-cpp's logits give it", async (t) => {
    const target = await openTarget(t);
    const generated = await target.generate(prompt, 6);
    const cached = target.cached;
    const before = generated.slice(0, 4);
    const chosen = defined(generated[4], "the fifth generated token");
    // the second most likely token there, from node-llama-cpp's probabilities (a softmax of the same logits)
    const model = await llama.loadModel({ modelPath: targetModel });
    const context = await model.createContext({ contextSize, sequences: 1, threads: testThreads });
    let probabilities: Map<Token, number>;
    try {
        const tokens = [...prompt, ...before];
        const input: ControlledEvaluateInputItem[] = tokens.map((token, i) =>
            i === tokens.length - 1 ? [token as Token, { generateNext: { probabilities: true } }] : (token as Token),
        );
        const outputs = await context.getSequence().controlledEvaluate(input);
        probabilities = outputs.at(-1)?.next?.probabilities ?? new Map();
    } finally {
        await context.dispose();
        await model.dispose();
    }
    const ranked = [...probabilities.entries()].sort((a, b) => b[1] - a[1]);
    const [best, pBest] = defined(ranked[0], "the most likely token");
    assert.equal(best, chosen, "the target alone's token is the most likely one");
    const [runnerUp, pRunnerUp] = defined(ranked[1], "the runner-up");
    const { gap, disagreement } = await target.logitGap(prompt, before, chosen, runnerUp);
    assert.ok(gap > 0, `gap ${gap}`);
    const expected = Math.log(pBest / pRunnerUp);
    assert.ok(Math.abs(gap - expected) < 0.05, `gap ${gap}, node-llama-cpp ${expected}`);
    // the CPU's one-token and multi-token paths nearly agree: far below the gap, so no tie
    assert.ok(disagreement >= 0 && disagreement < 0.05, `disagreement ${disagreement}`);
    assert.equal((await target.logitGap(prompt, before, runnerUp, chosen)).gap, -gap);
    assert.equal((await target.logitGap(prompt, before, chosen, chosen)).gap, 0);
    await assert.rejects(target.logitGap(prompt, before, chosen, target.vocabSize), /out of the vocabulary/);
    // its own context: the target's cache is as it was
    assert.equal(target.cached, cached);
    assert.deepEqual(await target.generate(prompt, 6), generated);
});

test("replay: decoding a run's calls again gives the logits it computed, in a context of its own", async (t) => {
    const target = await openTarget(t, { backendSampling: true });
    // a run's calls: the prompt alone, then steps of a token and 4 drafts, the last 2 rejected each time
    const calls: TargetCall[] = [{ keep: 0, tokens: prompt, outputFrom: prompt.length - 1 }];
    const outputs = [await target.verify(prompt, 0, prompt.length - 1)];
    let keep = prompt.length;
    for (let step = 0; step < 4; step++) {
        const last = outputs.at(-1)?.at(-1) ?? 0;
        const tokens = [last, 100 + step, 200 + step, 300 + step, 400 + step];
        calls.push({ keep, tokens, outputFrom: 0 });
        outputs.push(await target.verify(tokens, keep, 0));
        keep += 3;
    }
    const cached = target.cached;
    for (const [i, call] of calls.entries()) {
        for (let row = call.outputFrom; row < call.tokens.length; row++) {
            const logits = await target.replayLogits(calls.slice(0, i + 1), row);
            assert.equal(logits.length, target.vocabSize);
            assert.equal(argmax(logits), outputs[i]?.[row - call.outputFrom], `call ${i}, row ${row}`);
        }
    }
    assert.equal(target.cached, cached, "replays leave the target's cache as it was");
    // the target alone's calls: the logits of its next token
    const generated = await target.generate(prompt, 5);
    const next = await target.replayLogits(aloneCalls(prompt, generated.slice(0, 4)));
    assert.equal(argmax(next), generated[4]);

    await assert.rejects(
        target.replayLogits([{ keep: 1, tokens: [1], outputFrom: 0 }]),
        /call 0: keep 1: expected 0 ≤ keep ≤ 0/,
    );
    await assert.rejects(
        target.replayLogits([{ keep: 0, tokens: prompt, outputFrom: 0 }]),
        /call 0: expected outputs 0 ≤ outputFrom < outputTo ≤ count, at most 9/,
    );
    await assert.rejects(target.replayLogits(calls.slice(0, 1), 0), /row must be an output of the last call/);
    await assert.rejects(target.replayLogits([]), /at least one call/);
});

test("bad calls: keep beyond the cache, too many outputs, bad token ids, a missing option", async (t) => {
    const target = await openTarget(t);
    await target.verify(prompt, 0, prompt.length - 1);
    await assert.rejects(target.verify([1], prompt.length + 1, 0), /keep 13: expected 0 ≤ keep ≤ 12/);
    await assert.rejects(
        target.verify(
            Array.from({ length: 12 }, (_, i) => i + 1),
            0,
            0,
        ),
        /outputFrom 0 of 12 tokens: expected at least 1 and at most 9 outputs/,
    );
    await assert.rejects(target.verify([1], 0, 1), /outputFrom 1 of 1 tokens/);
    await assert.rejects(target.verify([4003], 0, 0), /token id 4003 at index 0: expected 0 ≤ id < 4003/);
    // a failed call changes nothing: the cache still holds the prompt
    assert.equal(target.cached, prompt.length);

    const { loadNativeAddon } = await import("../../src/engine/nativeAddon.js");
    const addon = loadNativeAddon("cpu");
    const raw = addon.create<NativeTargetHandle>("Target");
    const options = {
        binsDir: addon.binsDir,
        modelPath: targetModel,
        contextSize,
        batchSize: 64,
        ubatchSize: 64,
        gpuLayers: 0,
        flashAttention: "auto" as const,
        backendSampling: true,
        maxOutputs,
        threads: 1,
        verbose: false,
    };
    const { maxOutputs: _left, ...missing } = options;
    assert.throws(() => raw.load(missing as typeof options), /option maxOutputs: expected a 32-bit integer/);
    assert.throws(() => raw.load({ ...options, contextSize: 1 }), /option contextSize: expected ≥ 2, got 1/);
    assert.throws(
        () => raw.load({ ...options, flashAttention: "yes" as "on" }),
        /option flashAttention: expected "auto", "on" or "off", got "yes"/,
    );
});
