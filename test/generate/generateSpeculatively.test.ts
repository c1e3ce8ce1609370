/**
 * specdraft's verification loop on the CPU with the tiny fixtures: with the native target, lossless (speculative output
 * == the target alone, or parted at a near tie its replay names) and identical, step for step, to the same loop over a
 * node-llama-cpp sequence fed the same drafts (bench/libraryVerifiers: the same decode shapes, so exactly the same
 * numbers); the prompt decoded alone first, then one llama_decode per target step; the native in-process drafter
 * drafts what node-llama-cpp's lock-step draft model drafts.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { InputLookupTokenPredictor, type Llama } from "node-llama-cpp";
import { GreedyDraftTokenPredictor } from "../../bench/libraryVerifiers/GreedyDraftTokenPredictor.js";
import { llamaSequenceTarget } from "../../bench/libraryVerifiers/nodeLlamaCppGeneration.js";
import { runLibraryVerifier } from "../../bench/libraryVerifiers/runLibraryVerifier.js";
import { defaultLookahead } from "../../src/engine/engineDefaults.js";
import { generateAloneNative, TimedTokenPredictor } from "../../src/generate/generateGreedily.js";
import { generateSpeculatively, type SpeculativeTarget } from "../../src/generate/generateSpeculatively.js";
import { NativeTarget } from "../../src/generate/NativeTarget.js";
import { replayDifference } from "../../src/generate/replayDifference.js";
import { type RunGenerateOptions, runGenerate } from "../../src/generate/runGenerate.js";
import { firstDifference } from "../../src/generate/summarizeGeneration.js";
import type { GenerateSummary, GenerationRun, TargetCall } from "../../src/generate/types.js";
import { assertLossless } from "../helpers/assertLossless.js";
import { defined } from "../helpers/defined.js";
import {
    cpuLlama,
    quantizedDrafter,
    targetModel,
    testDraftLength,
    testGenerateOptions,
    testThreads,
} from "./testModels.js";

const contextSize = 192;
const maxTokens = 48;
const draftLength = testDraftLength;
/** Token-id prompts (the text prompt of testPrompts needs the tokenizer; runGenerate covers it below). */
const prompts = [
    [785, 3974, 1876, 3835, 3420, 916, 279, 1567, 562, 13, 785, 3974, 1876],
    [12, 400, 12, 400, 12, 400, 12, 77, 91, 12, 400],
];

let llama: Llama;
before(async () => {
    llama = await cpuLlama();
});
after(async () => {
    await llama.dispose();
});

/** A lock-step predictor over `draftPath` in node-llama-cpp (what exact-node-llama-cpp uses), and its disposal. */
async function lockStepPredictor(draftPath: string) {
    const model = await llama.loadModel({ modelPath: draftPath });
    const context = await model.createContext({ contextSize, sequences: 1, threads: testThreads });
    const predictor = new TimedTokenPredictor(new GreedyDraftTokenPredictor(context.getSequence(), draftLength));
    return {
        predictor,
        close: async () => {
            await context.dispose();
            await model.dispose();
        },
    };
}

/**
 * The speculative run's tokens equal the target alone's, or part from them at a near tie: decoded again in the shapes
 * that made each (replayDifference.ts), the target computed both tokens there (the two runs decode in other shapes, so
 * equality is not the promise).
 */
async function assertSameOrNearTie(
    target: NativeTarget,
    prompt: readonly number[],
    alone: readonly number[],
    speculative: { tokens: readonly number[]; calls: readonly TargetCall[] },
): Promise<void> {
    const difference = firstDifference(alone, speculative.tokens);
    if (difference === undefined) return;
    const replay = await replayDifference(target, prompt, alone, speculative.calls, difference);
    assert.equal(replay.nearTie, true, `speculative output parts from the target alone: ${JSON.stringify(replay)}`);
}

const counts = (run: GenerationRun) => ({
    tokens: run.tokens,
    targetSteps: run.targetSteps,
    drafted: run.drafted,
    accepted: run.accepted,
});

for (const [name, draftPath] of [
    ["the target as its own drafter", targetModel],
    ["a quantized drafter", quantizedDrafter],
] as const) {
    test(`${name}: lossless and step for step the exact verifier over node-llama-cpp`, async (t) => {
        const target = await NativeTarget.load({
            modelPath: targetModel,
            contextSize,
            maxOutputs: draftLength + 1,
            gpu: "cpu",
            threads: testThreads,
        });
        t.after(() => target.dispose());
        const targetModelNlc = await llama.loadModel({ modelPath: targetModel });
        const verifierContext = await targetModelNlc.createContext({ contextSize, sequences: 1, threads: testThreads });
        const verifierSequence = llamaSequenceTarget(verifierContext.getSequence());
        t.after(async () => {
            await verifierContext.dispose();
            await targetModelNlc.dispose();
        });
        const forNative = await lockStepPredictor(draftPath);
        const forLibrary = await lockStepPredictor(draftPath);
        t.after(forNative.close);
        t.after(forLibrary.close);

        let accepted = 0;
        for (const prompt of prompts) {
            const alone = await generateAloneNative(target, prompt, maxTokens);
            assert.equal(alone.tokens.length, maxTokens);
            const before = { ...target.stats };
            const { run: native, calls } = await generateSpeculatively(
                target,
                forNative.predictor,
                prompt,
                maxTokens,
                draftLength,
            );
            // one llama_decode per target step (the prompts fit one batch), the first the prompt alone, as the target
            // alone decodes it
            assert.equal(target.stats.decodes - before.decodes, native.targetSteps);
            assert.deepEqual(calls[0], { keep: 0, tokens: prompt, outputFrom: prompt.length - 1 });
            assert.equal(
                target.stats.tokens - before.tokens,
                calls.map((c) => c.tokens.length).reduce((a, b) => a + b),
            );
            await assertSameOrNearTie(target, prompt, alone.tokens, { tokens: native.tokens, calls });
            const library = await generateSpeculatively(
                verifierSequence,
                forLibrary.predictor,
                prompt,
                maxTokens,
                draftLength,
            );
            assert.deepEqual(counts(native), counts(library.run));
            assert.deepEqual(library.calls, calls);
            accepted += native.accepted;
        }
        assert.ok(accepted > 0, "some drafts were accepted");
        if (draftPath === targetModel) {
            // a perfect drafter: every step takes its whole draft but at the cut to maxTokens
            for (const prompt of prompts) {
                const { run } = await generateSpeculatively(
                    target,
                    forNative.predictor,
                    prompt,
                    maxTokens,
                    draftLength,
                );
                assert.ok(run.tokens.length / run.targetSteps > draftLength - 1, JSON.stringify(counts(run)));
            }
        }
    });
}

test("specdraft generate (native target, native drafter) == the bench's exact-node-llama-cpp, and lossless", async () => {
    const summaries: GenerateSummary<string>[] = [];
    const options = (more: Partial<RunGenerateOptions>): RunGenerateOptions => ({
        ...testGenerateOptions(llama),
        draft: { kind: "model", path: quantizedDrafter },
        ...more,
    });
    const generate = (more: Partial<RunGenerateOptions>) => runGenerate(options(more));
    for (const verifier of ["exact", "exact-node-llama-cpp"] as const) {
        for (const draft of [{ kind: "model", path: quantizedDrafter } as const, { kind: "ngram" } as const]) {
            const summary =
                verifier === "exact"
                    ? await generate({ draft })
                    : await runLibraryVerifier({ ...options({ draft }), verifier });
            assertLossless(summary);
            assert.equal(summary.verifier, verifier);
            summaries.push(summary);
        }
    }
    const nativeModel = defined(summaries[0], "the native verifier's model-drafted run");
    const nativeLookup = defined(summaries[1], "the native verifier's lookup run");
    const libraryModel = defined(summaries[2], "the node-llama-cpp verifier's model-drafted run");
    const libraryLookup = defined(summaries[3], "the node-llama-cpp verifier's lookup run");
    const firstRun = (runs: readonly GenerationRun[]): GenerationRun => defined(runs[0], "the first run");
    for (const [native, library] of [
        [nativeModel, libraryModel],
        [nativeLookup, libraryLookup],
    ] as const) {
        assert.deepEqual(
            native.prompts.map((p) => counts(firstRun(p.speculative))),
            library.prompts.map((p) => counts(firstRun(p.speculative))),
        );
        assert.deepEqual(
            native.prompts.map((p) => firstRun(p.alone).tokens),
            library.prompts.map((p) => firstRun(p.alone).tokens),
        );
    }
    assert.ok(nativeModel.speculative.accepted > 0);
    assert.equal(nativeModel.settings.gpu, "cpu");
    // the in-process drafter is the draft engine with its defaults, candidates included; off, it drafts the same
    const { candidates, stepTokens } = defaultLookahead.cpu;
    assert.equal(nativeModel.settings.draftLookahead, Math.min(candidates, stepTokens - 1));
    const withoutCandidates = await generate({ draftLookahead: 0 });
    assert.equal(withoutCandidates.settings.draftLookahead, 0);
    assert.deepEqual(
        withoutCandidates.prompts.map((p) => counts(firstRun(p.speculative))),
        nativeModel.prompts.map((p) => counts(firstRun(p.speculative))),
    );
});

test("a decode that only ends the output is not a step that produced tokens, as for the target alone: τ ≥ 1", async () => {
    const end = 9;
    let verifies = 0;
    // the target's first step yields one token, its second only the end token
    const target: SpeculativeTarget = {
        contextSize: 64,
        maxOutputs: 17,
        isEog: (token) => token === end,
        verify: async (tokens, _keep, outputFrom) =>
            Array.from({ length: tokens.length - outputFrom }, () => (verifies++ === 0 ? 5 : end)),
    };
    const predictor = new TimedTokenPredictor(new InputLookupTokenPredictor());
    const { run } = await generateSpeculatively(target, predictor, [1, 2, 3], 10, 4);
    assert.deepEqual(run.tokens, [5]);
    assert.equal(verifies, 2, "the target ran twice");
    assert.equal(run.targetSteps, 1, "one step produced the output; the other produced only its end");
    assert.ok(run.tokens.length / run.targetSteps >= 1);
});
