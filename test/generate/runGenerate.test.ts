/**
 * Lossless speculation with an in-process draft GGUF and with prompt lookup: every speculative output must equal the
 * target alone, or part from it only at a near tie (assertLossless). The target as its own drafter makes every draft
 * right, so the acceptance paths run, not only rejections.
 */
import assert from "node:assert/strict";
import { availableParallelism } from "node:os";
import { after, before, test } from "node:test";
import type { Llama } from "node-llama-cpp";
import { readModelFileInfo } from "../../src/engine/gguf.js";
import { type RunGenerateOptions, runGenerate } from "../../src/generate/runGenerate.js";
import { GenerateError, type GenerateSummary } from "../../src/generate/types.js";
import { assertLossless } from "../helpers/assertLossless.js";
import {
    cpuLlama,
    otherVocabModel,
    quantizedDrafter,
    targetModel,
    testDraftLength,
    testGenerateOptions,
    testPrompts,
} from "./testModels.js";

let llama: Llama;
before(async () => {
    llama = await cpuLlama();
});
after(async () => {
    await llama.dispose();
});

const draftLength = testDraftLength;

function generate(options: Partial<RunGenerateOptions> & Pick<RunGenerateOptions, "draft">): Promise<GenerateSummary> {
    return runGenerate({ ...testGenerateOptions(llama), ...options });
}

test("the target as its own draft model: identical output, drafts accepted", async () => {
    const summary = await generate({ draft: { kind: "model", path: targetModel } });
    assertLossless(summary);
    assert.ok(summary.speculative.accepted > 0, "some drafts are accepted");
    assert.equal(summary.verifier, "exact");
    // a drafter identical to the target: every step takes the whole draft, except at the cut to maxTokens
    assert.ok(summary.tau > draftLength - 1, `τ ${summary.tau} with a perfect drafter and k = ${draftLength}`);
});

test("a quantized drafter of the same vocabulary: identical output", async () => {
    const summary = await generate({ draft: { kind: "model", path: quantizedDrafter }, runs: 2 });
    assertLossless(summary);
    assert.equal(summary.draft.quantization, "Q4_0", "the table's weights row names the drafter's type");
    assert.equal(summary.prompts[0]?.speculative.length, 2);
    assert.ok(summary.speculative.drafted > 0, "drafts were offered");
    assert.ok(summary.draftTimeShare > 0 && summary.draftTimeShare < 1, `draft time share ${summary.draftTimeShare}`);
});

test("prompt lookup: identical output", async () => {
    // the loop takes no drafts at the prompt's own step, where the test prompts' repeats are: a prompt of every token
    // id once lets lookup find whatever the target generates and offer the tokens after it
    const everyToken = Array.from({ length: (await readModelFileInfo(targetModel)).vocabSize }, (_, id) => id);
    const prompts = [...testPrompts, { id: "every-token", tokens: everyToken }];
    const summary = await generate({ draft: { kind: "ngram" }, prompts });
    assertLossless(summary);
    assert.equal(summary.draft.kind, "ngram");
    assert.ok(summary.speculative.drafted > 0, "lookup finds drafts");
});

test("without threads given, every context gets the CPUs less one, not node-llama-cpp's oversubscribing default", async () => {
    const summary = await runGenerate({
        target: targetModel,
        prompts: testPrompts.slice(0, 1),
        maxTokens: 8,
        draftLength,
        gpu: "cpu",
        llama,
        draft: { kind: "ngram" },
    });
    assert.equal(summary.settings.threads, Math.max(1, Math.min(availableParallelism() - 1, 8)));
    assertLossless(summary);
});

test("a draft model with another vocabulary is refused before generating", async () => {
    await assert.rejects(generate({ draft: { kind: "model", path: otherVocabModel } }), (error: unknown) => {
        assert.ok(error instanceof GenerateError);
        assert.equal(error.code, "vocab_mismatch");
        assert.match(error.message, /Vocabulary mismatch/);
        assert.ok(error.message.includes(otherVocabModel), "the message names the drafter");
        return true;
    });
});

test("a prompt token outside the target's vocabulary is bad input", async () => {
    await assert.rejects(
        generate({ draft: { kind: "ngram" }, prompts: [{ id: "big", tokens: [1, 2, 999999] }] }),
        (error: unknown) => {
            assert.ok(error instanceof GenerateError);
            assert.equal(error.code, "bad_input");
            assert.match(error.message, /token 2 is 999999/);
            return true;
        },
    );
});
