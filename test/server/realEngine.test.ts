/**
 * The HTTP layer over the real engine (src/engine/loadEngine.ts) and the tiny GGUF fixtures, on the CPU: a draft
 * alone == the same draft in a batch of 32 == the draft after prefix reuse (with fewer tokens evaluated, per
 * /metrics); TensorRT-LLM's end_id; /info's fingerprint follows the vocabulary; the CLI serves a real model end to end.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { type LoadEngineOptions, loadEngine } from "../../src/engine/loadEngine.js";
import { type App, buildApp } from "../../src/server/buildApp.js";
import { ServerMetrics } from "../../src/server/ServerMetrics.js";
import { sample } from "../helpers/metricSamples.js";
import { assertDraftsAgree, draftPairs } from "../helpers/nearTies.js";
import { cliPath, repoRoot, spawnServe } from "./serveProcess.js";
import { serveAppDefaults } from "./testApp.js";

const tinyModel = join(repoRoot, "test/fixtures/tiny-qwen3.gguf");
const tinyQ4Model = join(repoRoot, "test/fixtures/tiny-qwen3-q4_0.gguf");
const otherVocabModel = join(repoRoot, "test/fixtures/tiny-qwen3-vocab2.gguf");
const streams = 32;
const contextSize = 256;
const draftLength = 8;
/** One thread: llama.cpp's spinning thread pool crawls when the test machine's cores are shared. */
const threads = 1;

/** An app with a freshly loaded real engine (no KV cache yet). */
async function realApp(modelPath = tinyModel, options: Partial<LoadEngineOptions> = {}): Promise<App> {
    const metrics = new ServerMetrics();
    const built = buildApp({ ...serveAppDefaults, metrics, draftLength });
    const engine = await loadEngine({
        modelPath,
        streams,
        contextSize,
        gpu: "cpu",
        threads,
        observer: metrics.engineObserver,
        ...options,
    });
    built.slot.fill(engine);
    return built;
}

async function closeApp({ app, slot }: App): Promise<void> {
    await app.close();
    await slot.loaded?.close();
}

/** The loaded engine's vocabulary size (realApp loads it before returning). */
function vocabSizeOf(app: App): number {
    const engine = app.slot.loaded;
    assert.ok(engine, "the engine is loaded");
    return engine.info.vocabSize;
}

async function draft(app: App, tokens: number[], n = draftLength): Promise<number[]> {
    const res = await app.app.inject({ method: "POST", url: "/draft", payload: { tokens, n } });
    assert.equal(res.statusCode, 200, res.body);
    return res.json().draft;
}

/** An unlabelled sample of the app's /metrics (a missing one fails the test). */
async function counter(app: App, name: string): Promise<number> {
    return sample((await app.app.inject({ method: "GET", url: "/metrics" })).body, name);
}

/** Context `s` of `contexts`: 20 + 3s tokens, its first one s · 97. */
function context(vocabSize: number, s: number): number[] {
    return Array.from({ length: 20 + 3 * s }, (_, i) => (s * 97 + i * 31 + ((i * i) % 17)) % (vocabSize - 3));
}

/** 32 contexts of different lengths that share no first token (so no prefix is reused between them). */
function contexts(vocabSize: number): number[][] {
    return Array.from({ length: streams }, (_, s) => context(vocabSize, s));
}

describe("real engine", () => {
    let alone: App;
    let batched: App;
    before(async () => {
        alone = await realApp();
        batched = await realApp();
    });
    after(async () => {
        await closeApp(alone);
        await closeApp(batched);
    });

    test("a draft alone == the same draft in a batch of 32 == after prefix reuse, with fewer tokens evaluated", async () => {
        const vocabSize = vocabSizeOf(alone);
        const cs = contexts(vocabSize);
        const aloneDrafts: number[][] = [];
        for (const c of cs) aloneDrafts.push(await draft(alone, c));
        for (const d of aloneDrafts) assert.equal(d.length, draftLength);

        const decodesBefore = await counter(batched, "specdraft_decode_batch_sequences_count");
        const batchDrafts = await Promise.all(cs.map((c) => draft(batched, c)));
        // other decode shapes: the same drafts up to near ties of the model's logits (../helpers/nearTies.ts)
        await assertDraftsAgree(tinyModel, draftPairs(cs, aloneDrafts, batchDrafts), "batched");
        const decodes = (await counter(batched, "specdraft_decode_batch_sequences_count")) - decodesBefore;
        const sequencesSum = await counter(batched, "specdraft_decode_batch_sequences_sum");
        assert.ok(sequencesSum / decodes > 1, `drafts were batched: ${sequencesSum} sequences over ${decodes} decodes`);

        // one walk step: the first 5 drafted tokens accepted + 1 corrected token
        const [first] = cs;
        const [firstDraft] = aloneDrafts;
        const sixth = firstDraft?.[5];
        assert.ok(first && firstDraft && sixth !== undefined);
        const grown = [...first, ...firstDraft.slice(0, 5), (sixth + 1) % (vocabSize - 3)];
        const evaluatedBefore = await counter(batched, "specdraft_prefix_tokens_evaluated_total");
        const reusedBefore = await counter(batched, "specdraft_prefix_tokens_reused_total");
        const reusedDraft = await draft(batched, grown);
        const evaluated = (await counter(batched, "specdraft_prefix_tokens_evaluated_total")) - evaluatedBefore;
        const reused = (await counter(batched, "specdraft_prefix_tokens_reused_total")) - reusedBefore;

        const fresh = await realApp();
        try {
            const pair = { context: grown, expected: await draft(fresh, grown), actual: reusedDraft };
            await assertDraftsAgree(tinyModel, [pair], "after prefix reuse");
            assert.equal(await counter(fresh, "specdraft_prefix_tokens_evaluated_total"), grown.length);
        } finally {
            await closeApp(fresh);
        }
        assert.ok(reused >= first.length, `reused ${reused} of ${grown.length}`);
        assert.ok(evaluated < grown.length, `evaluated ${evaluated} of ${grown.length}`);
        assert.equal(evaluated + reused, grown.length);
    });

    test("TensorRT-LLM form: the same draft as draft_tokens, cut after end_id and at max_sequence_length", async () => {
        const prefix = context(vocabSizeOf(alone), 3);
        const full = await draft(alone, prefix);
        const trt = async (body: object) => {
            const res = await alone.app.inject({
                method: "POST",
                url: "/draft",
                payload: { prefix, ...body },
            });
            assert.equal(res.statusCode, 200, res.body);
            return res.json();
        };
        assert.deepEqual(await trt({ request_id: 11 }), { draft_tokens: full, request_id: 11 });
        const endId = full[2];
        assert.ok(endId !== undefined, `a draft of ${full.length}`);
        assert.deepEqual(await trt({ end_id: endId }), { draft_tokens: full.slice(0, full.indexOf(endId) + 1) });
        assert.deepEqual(await trt({ max_sequence_length: prefix.length + 3 }), { draft_tokens: full.slice(0, 3) });
    });

    test("an out-of-vocabulary id names the model's vocabulary size", async () => {
        const vocabSize = vocabSizeOf(alone);
        const res = await alone.app.inject({ method: "POST", url: "/draft", payload: { tokens: [1, 2, vocabSize] } });
        assert.equal(res.statusCode, 400);
        assert.equal(
            res.json().error.message,
            `Invalid token id ${vocabSize} at index 2: expected 0 ≤ id < ${vocabSize}.`,
        );
    });
});

test("/metrics counts the candidates each step checked and kept; /info says the setting; drafts are the plain ones", async () => {
    const plain = await realApp(tinyModel, { lookahead: 0 });
    const withCandidates = await realApp(tinyModel, { lookahead: 4, lookaheadStepTokens: 5 });
    try {
        assert.deepEqual((await withCandidates.app.inject({ method: "GET", url: "/info" })).json().lookahead, {
            candidates: 4,
            step_tokens: 5,
            fill: false,
        });
        // random weights loop, so their own earlier tokens predict them: the lookup has guesses to check
        const tokens = context(vocabSizeOf(plain), 5);
        const n = 40;
        const expected = await draft(plain, tokens, n);
        const steps = await counter(withCandidates, "specdraft_step_decode_seconds_count");
        const pair = { context: tokens, expected, actual: await draft(withCandidates, tokens, n) };
        await assertDraftsAgree(tinyModel, [pair], "with candidates");
        const taken = (await counter(withCandidates, "specdraft_step_decode_seconds_count")) - steps;
        const proposed = await counter(withCandidates, "specdraft_lookahead_candidates_total");
        const accepted = await counter(withCandidates, "specdraft_lookahead_accepted_total");
        assert.equal(await counter(withCandidates, "specdraft_draft_tokens_total"), n);
        assert.ok(accepted > 0 && accepted <= proposed, `${accepted} of ${proposed} candidates kept`);
        // every kept candidate saved a step: n tokens in n − accepted steps (one sequence, one request)
        assert.equal(taken, n - accepted);
        assert.equal(await counter(plain, "specdraft_lookahead_candidates_total"), 0);
    } finally {
        await closeApp(plain);
        await closeApp(withCandidates);
    }
});

test("/info: the fingerprint follows the vocabulary, not the weights", async () => {
    const infos = [];
    for (const model of [tinyModel, tinyQ4Model, otherVocabModel]) {
        const app = await realApp(model);
        try {
            infos.push((await app.app.inject({ method: "GET", url: "/info" })).json());
        } finally {
            await closeApp(app);
        }
    }
    const [base, quantized, otherVocab] = infos;
    assert.match(base.vocab_fingerprint, /^[0-9a-f]{64}$/);
    assert.equal(quantized.vocab_fingerprint, base.vocab_fingerprint);
    assert.notEqual(quantized.quantization, base.quantization);
    assert.notEqual(otherVocab.vocab_fingerprint, base.vocab_fingerprint);
    assert.equal(base.architecture, "qwen3");
    assert.equal(base.draft_length, draftLength);
    assert.equal(base.context_size, contextSize);
    assert.equal(base.streams, streams);
    assert.equal(base.backend, "cpu");
});

test("the CLI serves a real model: ready line, a draft, SIGTERM → exit 0", async () => {
    const serve = spawnServe(cliPath, [
        "serve",
        "--model",
        tinyModel,
        "--port",
        "0",
        "--gpu",
        "cpu",
        "--streams",
        "2",
        "--context",
        "128",
        "--threads",
        "1",
        "--lookahead",
        "2",
        "--lookahead-step-tokens",
        "9",
        "--lookahead-fill",
        "on",
        "--kv-type",
        "f32",
        "--flash-attention",
        "off",
        "--pad-batch",
        "0",
        "--step-prefill",
        "0",
    ]);
    try {
        const [, url] = await serve.waitForLine(/serving .* at (http:\/\/\S+)\n/);
        const info = await (await fetch(`${url}/info`)).json();
        assert.deepEqual(info.lookahead, { candidates: 2, step_tokens: 9, fill: true });
        const res = await fetch(`${url}/draft`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ tokens: [10, 20, 30], n: 5 }),
        });
        assert.equal(res.status, 200);
        const body = await res.json();
        assert.equal(body.draft.length, 5);
        serve.child.kill("SIGTERM");
        assert.equal(await serve.exited, 0);
    } finally {
        serve.child.kill("SIGKILL");
    }
});

test("without --model the CLI serves the default drafter of the package, whatever the working directory", async () => {
    const defaultModel = join(repoRoot, "models/specdraft-default.gguf");
    const serve = spawnServe(
        cliPath,
        ["serve", "--port", "0", "--gpu", "cpu", "--streams", "1", "--context", "64", "--threads", "1"],
        {
            cwd: "/",
        },
    );
    try {
        // either it loads (listening … loading <path>) or the file is not there yet (Model file <path> …): both name it
        await Promise.race([serve.exited, serve.waitForStderr(/listening at/)]);
        assert.ok(serve.stderr().includes(defaultModel), serve.stderr());
    } finally {
        serve.child.kill("SIGKILL");
    }
});
