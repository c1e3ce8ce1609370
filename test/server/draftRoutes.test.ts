/** POST /draft in-process (app.inject): both request forms, every bad input, queue_full, and that serving goes on. */

import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { defaultDraftLength } from "../../src/engine/engineDefaults.js";
import { errorCatalog } from "../../src/server/errors.js";
import { maxDraftLength } from "../../src/server/serveDefaults.js";
import { fakeDraft } from "./FakeEngine.js";
import { buildTestApp } from "./testApp.js";

const vocabSize = 1000;
const contextSize = 64;
const { app, engine } = buildTestApp({ vocabSize, contextSize });
after(() => app.close());

function post(payload: unknown, headers: Record<string, string> = {}) {
    return app.inject({ method: "POST", url: "/draft", payload: payload as object, headers });
}

describe("specdraft form", () => {
    test("drafts --draft-len tokens when n is not given", async () => {
        const res = await post({ tokens: [5, 6, 7] });
        assert.equal(res.statusCode, 200);
        assert.deepEqual(res.json(), { draft: fakeDraft([5, 6, 7], defaultDraftLength) });
    });

    test("drafts n tokens and passes the context through unchanged", async () => {
        const res = await post({ tokens: [1, 2, 998], n: 4 });
        assert.deepEqual(res.json(), { draft: [999, 0, 1, 2] });
        assert.deepEqual(engine.calls.at(-1), { tokens: [1, 2, 998], n: 4, endId: undefined });
    });

    test("accepts n at both ends of 1..64 and a context that exactly fills the context size", async () => {
        assert.deepEqual((await post({ tokens: [3], n: 1 })).json(), { draft: [4] });
        const wide = buildTestApp({ contextSize: 1024 });
        try {
            const res = await wide.app.inject({
                method: "POST",
                url: "/draft",
                payload: { tokens: [3], n: maxDraftLength },
            });
            assert.deepEqual(res.json(), { draft: fakeDraft([3], maxDraftLength) });
        } finally {
            await wide.app.close();
        }
        const full = Array.from({ length: contextSize - 4 }, (_, i) => i);
        assert.deepEqual((await post({ tokens: full, n: 4 })).json(), { draft: fakeDraft(full, 4) });
    });

    test("ignores unknown keys, __proto__ and constructor included", async () => {
        const res = await post({ tokens: [9], n: 2, temperature: 0 });
        assert.deepEqual(res.json(), { draft: [10, 11] });
        const poisoned = await post(
            '{"tokens": [9], "n": 2, "__proto__": {"n": 5}, "constructor": {"prototype": {}}}',
            {
                "content-type": "application/json",
            },
        );
        assert.deepEqual(poisoned.json(), { draft: [10, 11] });
    });
});

describe("TensorRT-LLM external drafter form", () => {
    test("answers draft_tokens and echoes request_id", async () => {
        const res = await post({ prefix: [10, 20], request_id: 7 });
        assert.equal(res.statusCode, 200);
        assert.deepEqual(res.json(), { draft_tokens: fakeDraft([10, 20], defaultDraftLength), request_id: 7 });
    });

    test("without request_id answers only draft_tokens", async () => {
        assert.deepEqual((await post({ prefix: [10], n: 2 })).json(), { draft_tokens: [11, 12] });
        assert.deepEqual((await post({ prefix: [10], n: 2, request_id: null, end_id: null })).json(), {
            draft_tokens: [11, 12],
        });
    });

    test("stops the draft right after end_id", async () => {
        const res = await post({ prefix: [30], end_id: 33, request_id: "r1" });
        assert.deepEqual(res.json(), { draft_tokens: [31, 32, 33], request_id: "r1" });
        assert.equal(engine.calls.at(-1)?.endId, 33);
    });

    test("a negative end_id means none", async () => {
        const res = await post({ prefix: [30], end_id: -1, n: 5 });
        assert.deepEqual(res.json(), { draft_tokens: [31, 32, 33, 34, 35] });
        assert.equal(engine.calls.at(-1)?.endId, undefined);
    });

    test("never drafts past max_sequence_length", async () => {
        const prefix = [1, 2, 3, 4, 5];
        const cut = await post({ prefix, max_sequence_length: prefix.length + 3 });
        assert.deepEqual(cut.json(), { draft_tokens: fakeDraft(prefix, 3) });
        const roomy = await post({ prefix, max_sequence_length: 1000, n: 6 });
        assert.deepEqual(roomy.json(), { draft_tokens: fakeDraft(prefix, 6) });
    });

    test("answers an empty draft without drafting when the sequence is at max_sequence_length", async () => {
        const callsBefore = engine.calls.length;
        for (const max of [3, 2, 0]) {
            const res = await post({ prefix: [1, 2, 3], max_sequence_length: max, request_id: 1 });
            assert.equal(res.statusCode, 200);
            assert.deepEqual(res.json(), { draft_tokens: [], request_id: 1 });
        }
        assert.equal(engine.calls.length, callsBefore);
    });

    test("checks prefix ids like tokens", async () => {
        const res = await post({ prefix: [1, vocabSize], request_id: 3 });
        assert.equal(res.statusCode, 400);
        assert.equal(res.json().error.code, "invalid_token");
        assert.equal((await post({ prefix: [] })).json().error.code, "empty_tokens");
    });
});

describe("bad input answers 4xx with a catalog error and the server keeps serving", () => {
    const cases: {
        name: string;
        send: () => ReturnType<typeof post>;
        status: number;
        code: string;
        message?: string;
    }[] = [
        {
            name: "malformed JSON",
            send: () => post('{"tokens": [1, 2', { "content-type": "application/json" }),
            status: 400,
            code: "malformed_json",
        },
        {
            name: "empty JSON body",
            send: () => post("", { "content-type": "application/json" }),
            status: 400,
            code: "malformed_json",
        },
        {
            name: "not JSON",
            send: () => post("tokens=1,2", { "content-type": "application/x-www-form-urlencoded" }),
            status: 415,
            code: "unsupported_media_type",
        },
        { name: "a JSON array body", send: () => post([1, 2, 3]), status: 400, code: "invalid_body" },
        {
            name: "missing tokens",
            send: () => post({ n: 3 }),
            status: 400,
            code: "invalid_body",
            message: "Invalid request body: body must have required property 'tokens'.",
        },
        {
            name: "tokens not an array",
            send: () => post({ tokens: "1 2 3" }),
            status: 400,
            code: "invalid_body",
            message: "Invalid request body: tokens must be array.",
        },
        {
            name: "a string token id",
            send: () => post({ tokens: [1, "2"] }),
            status: 400,
            code: "invalid_token",
            message: `Invalid token id "2" at index 1: expected 0 ≤ id < ${vocabSize}.`,
        },
        {
            name: "a non-integer token id",
            send: () => post({ tokens: [1, 2, 2.5] }),
            status: 400,
            code: "invalid_token",
            message: `Invalid token id 2.5 at index 2: expected 0 ≤ id < ${vocabSize}.`,
        },
        {
            name: "a negative token id",
            send: () => post({ tokens: [-1] }),
            status: 400,
            code: "invalid_token",
            message: `Invalid token id -1 at index 0: expected 0 ≤ id < ${vocabSize}.`,
        },
        {
            name: "an out-of-vocabulary token id",
            send: () => post({ tokens: [0, 1, 2, vocabSize] }),
            status: 400,
            code: "invalid_token",
            message: `Invalid token id ${vocabSize} at index 3: expected 0 ≤ id < ${vocabSize}.`,
        },
        {
            name: "a token id too large for JSON numbers",
            send: () => post('{"tokens": [1, 1e400]}', { "content-type": "application/json" }),
            status: 400,
            code: "invalid_token",
            message: `Invalid token id Infinity at index 1: expected 0 ≤ id < ${vocabSize}.`,
        },
        {
            name: "empty tokens",
            send: () => post({ tokens: [] }),
            status: 400,
            code: "empty_tokens",
            message: "Empty tokens: expected at least one token id.",
        },
        {
            name: "n = 0",
            send: () => post({ tokens: [1], n: 0 }),
            status: 400,
            code: "invalid_draft_length",
            message: `Invalid n 0: expected an integer 1 ≤ n ≤ ${maxDraftLength}.`,
        },
        {
            name: "n = 65",
            send: () => post({ tokens: [1], n: maxDraftLength + 1 }),
            status: 400,
            code: "invalid_draft_length",
        },
        { name: "n a string", send: () => post({ tokens: [1], n: "5" }), status: 400, code: "invalid_draft_length" },
        { name: "n fractional", send: () => post({ tokens: [1], n: 2.5 }), status: 400, code: "invalid_draft_length" },
        {
            name: "context + n beyond the context size",
            send: () => post({ tokens: Array.from({ length: contextSize - 3 }, () => 1), n: 4 }),
            status: 400,
            code: "context_overflow",
            message: `${contextSize - 3} tokens + 4 to draft = ${contextSize + 1} exceed the context size: expected at most ${contextSize}.`,
        },
        {
            name: "end_id outside the vocabulary",
            send: () => post({ prefix: [1, 2], end_id: vocabSize }),
            status: 400,
            code: "invalid_token",
            message: `Invalid token id ${vocabSize} at end_id: expected 0 ≤ id < ${vocabSize}.`,
        },
        {
            name: "max_sequence_length not an integer",
            send: () => post({ prefix: [1], max_sequence_length: "10" }),
            status: 400,
            code: "invalid_body",
        },
        {
            name: "request_id neither integer nor string",
            send: () => post({ prefix: [1], request_id: 1.5 }),
            status: 400,
            code: "invalid_body",
            message: "Invalid request body: request_id must be integer,string,null.",
        },
        {
            name: "unknown route",
            send: () => app.inject({ method: "GET", url: "/drafts?x=1" }),
            status: 404,
            code: "not_found",
            message: "No route GET /drafts: expected one of POST /draft, GET /health, GET /info, GET /metrics.",
        },
        {
            name: "wrong method",
            send: () => app.inject({ method: "GET", url: "/draft" }),
            status: 404,
            code: "not_found",
        },
    ];

    for (const c of cases) {
        test(c.name, async () => {
            const callsBefore = engine.calls.length;
            const res = await c.send();
            assert.equal(res.statusCode, c.status, res.body);
            assert.match(res.headers["content-type"] as string, /^application\/json/);
            const body = res.json();
            assert.deepEqual(Object.keys(body), ["error"]);
            assert.equal(body.error.code, c.code);
            assert.equal(errorCatalog[c.code as keyof typeof errorCatalog].status, c.status);
            if (c.message !== undefined) assert.equal(body.error.message, c.message);
            assert.equal(engine.calls.length, callsBefore, "a bad request must not be drafted");
            const good = await post({ tokens: [41], n: 2 });
            assert.deepEqual(good.json(), { draft: [42, 43] });
        });
    }
});

test("a full queue answers 503 queue_full with Retry-After, then serves again", async () => {
    const small = buildTestApp({ maxQueue: 1 });
    try {
        small.engine.hold();
        const first = small.app.inject({ method: "POST", url: "/draft", payload: { tokens: [1], n: 2 } });
        await small.engine.started();
        const second = await small.app.inject({ method: "POST", url: "/draft", payload: { tokens: [1], n: 2 } });
        assert.equal(second.statusCode, 503);
        assert.equal(second.json().error.code, "queue_full");
        assert.equal(second.headers["retry-after"], "1");
        small.engine.release();
        assert.deepEqual((await first).json(), { draft: [2, 3] });
        assert.deepEqual(
            (await small.app.inject({ method: "POST", url: "/draft", payload: { tokens: [1], n: 2 } })).json(),
            { draft: [2, 3] },
        );
    } finally {
        await small.app.close();
    }
});
