/** GET /info: the engine's description in the API's field names, and a fingerprint that follows the vocabulary. */

import assert from "node:assert/strict";
import { test } from "node:test";
import { buildTestApp } from "./testApp.js";

test("reports the engine's info, the draft length and its limit", async () => {
    const { app, engine } = buildTestApp(
        { vocabSize: 4321, contextSize: 512, lookahead: { candidates: 6, stepTokens: 40, fill: true } },
        { draftLength: 9 },
    );
    try {
        const res = await app.inject({ method: "GET", url: "/info" });
        assert.equal(res.statusCode, 200);
        const info = res.json();
        assert.equal(info.vocab_size, 4321);
        assert.equal(info.context_size, 512);
        assert.equal(info.draft_length, 9);
        assert.equal(info.max_draft_length, 64);
        assert.equal(info.vocab_fingerprint, engine.info.vocabFingerprint);
        assert.deepEqual(info.lookahead, { candidates: 6, step_tokens: 40, fill: true });
        assert.deepEqual(Object.keys(info).sort(), [
            "architecture",
            "backend",
            "context_size",
            "draft_length",
            "engine",
            "file_bytes",
            "flash_attention",
            "lookahead",
            "max_draft_length",
            "model",
            "quantization",
            "streams",
            "vocab_fingerprint",
            "vocab_size",
        ]);
    } finally {
        await app.close();
    }
});

test("the fingerprint changes with the vocabulary", async () => {
    const a = buildTestApp({ vocabName: "a" });
    const b = buildTestApp({ vocabName: "b" });
    try {
        const infoA = (await a.app.inject({ method: "GET", url: "/info" })).json();
        const infoB = (await b.app.inject({ method: "GET", url: "/info" })).json();
        assert.equal(infoA.vocab_size, infoB.vocab_size);
        assert.notEqual(infoA.vocab_fingerprint, infoB.vocab_fingerprint);
    } finally {
        await a.app.close();
        await b.app.close();
    }
});
