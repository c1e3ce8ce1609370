/**
 * bench/libraryVerifiers: node-llama-cpp's own speculative path and specdraft's loop over a node-llama-cpp sequence,
 * with an in-process draft GGUF and with prompt lookup. Both stay lossless; with a perfect drafter (the target itself)
 * the library accepts at most one draft token per target step (τ ≤ 2, node-llama-cpp 3.21.1), the loop whole drafts.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Llama } from "node-llama-cpp";
import { type RunLibraryVerifierOptions, runLibraryVerifier } from "../../bench/libraryVerifiers/runLibraryVerifier.js";
import {
    cpuLlama,
    testDraftLength as draftLength,
    quantizedDrafter,
    targetModel,
    testGenerateOptions,
} from "../generate/testModels.js";
import { assertLossless } from "../helpers/assertLossless.js";

let llama: Llama;
before(async () => {
    llama = await cpuLlama();
});
after(async () => {
    await llama.dispose();
});

function generate(options: Pick<RunLibraryVerifierOptions, "draft" | "verifier"> & Partial<RunLibraryVerifierOptions>) {
    return runLibraryVerifier({ ...testGenerateOptions(llama), ...options });
}

test("the target as its own draft model: the library accepts one draft token a step at most, the loop all", async () => {
    const library = await generate({ draft: { kind: "model", path: targetModel }, verifier: "node-llama-cpp" });
    assertLossless(library);
    assert.equal(library.verifier, "node-llama-cpp");
    assert.ok(library.speculative.accepted > 0, "some drafts are accepted");
    assert.ok(library.speculative.accepted <= library.speculative.targetSteps, JSON.stringify(library.speculative));
    assert.ok(library.tau > 1 && library.tau <= 2, `τ ${library.tau}`);

    const loop = await generate({ draft: { kind: "model", path: targetModel }, verifier: "exact-node-llama-cpp" });
    assertLossless(loop);
    assert.ok(loop.tau > draftLength - 1, `τ ${loop.tau} with a perfect drafter and k = ${draftLength}`);
});

test("node-llama-cpp's verifier, a quantized drafter of the same vocabulary: lossless", async () => {
    const summary = await generate({
        draft: { kind: "model", path: quantizedDrafter },
        verifier: "node-llama-cpp",
        runs: 2,
    });
    assertLossless(summary);
    assert.equal(summary.draft.quantization, "Q4_0");
    assert.equal(summary.prompts[0]?.speculative.length, 2);
    assert.ok(summary.speculative.drafted > 0, "drafts were offered");
});

test("node-llama-cpp's verifier, prompt lookup: lossless", async () => {
    const summary = await generate({ draft: { kind: "ngram" }, verifier: "node-llama-cpp" });
    assertLossless(summary);
    assert.equal(summary.draft.kind, "ngram");
    assert.ok(summary.speculative.drafted > 0, "lookup finds drafts");
});
