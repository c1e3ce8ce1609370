/** `llama-server+http://…` speaks llama.cpp's /completion, greedy, and walks to the same figures as /draft. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { createDraftClient } from "../../src/client/createDraftClient.js";
import { summarizeWalk } from "../../src/validate/summarizeWalk.js";
import { defaultConcurrency, walkHeldOut } from "../../src/validate/walkHeldOut.js";
import { conversation, draftWithPlantedError, locate } from "../helpers/continuationOracle.js";
import { sendJson, startFakeServer } from "../helpers/startFakeServer.js";

const conversations = [conversation("x", 1, 12), conversation("y", 2, 7)];

test("llama-server /completion: prompt as ids, n_predict k, greedy sampling, tokens back", async () => {
    const server = await startFakeServer((path, body, response) => {
        const request = body as Record<string, unknown>;
        if (path !== "/completion") return sendJson(response, 404, {});
        const hit = locate(conversations, request.prompt as number[]);
        if (!hit) return sendJson(response, 400, {});
        // error at draft index 1 → a = 1, advance 2 per step (the tail's cap 1 still advances 1)
        sendJson(response, 200, {
            content: "…",
            tokens: draftWithPlantedError(hit.conversation, hit.position, request.n_predict as number, 1),
            stop: true,
        });
    });
    try {
        const client = createDraftClient(`llama-server+${server.url}`, 5_000);
        assert.equal(client.url, `llama-server+${server.url}`);
        assert.match(client.name, /^llama-server-127\.0\.0\.1-\d+$/);
        const summary = summarizeWalk(
            await walkHeldOut(conversations, client, { draftLength: 5, concurrency: defaultConcurrency }),
        );
        // x: L = 12 → 6 steps of 2; y: L = 7 → 3 steps of 2, then pos 6 with cap 1: a = 1 → 4 steps
        assert.equal(summary.steps, 6 + 4);
        assert.equal(summary.tau, 19 / 10);
        assert.equal(summary.failures.total, 0);
        const [request] = server.requests;
        assert.ok(request, "the server received no request");
        const first = request.body as Record<string, unknown>;
        assert.equal(first.n_predict, 5);
        assert.equal(first.temperature, 0);
        assert.equal(first.top_k, 1);
        assert.deepEqual(first.samplers, ["top_k"]);
        assert.equal(first.return_tokens, true);
        assert.equal(first.cache_prompt, true);
        assert.ok(Array.isArray(first.prompt) && (first.prompt as unknown[]).every(Number.isInteger));
    } finally {
        await server.close();
    }
});

test("a llama-server answer without tokens (return_tokens ignored) is a malformed failure", async () => {
    const server = await startFakeServer((_path, _body, response) => sendJson(response, 200, { content: "text only" }));
    try {
        const summary = summarizeWalk(
            await walkHeldOut([conversation("x", 1, 2)], createDraftClient(`llama-server+${server.url}`, 5_000), {
                draftLength: 4,
                concurrency: defaultConcurrency,
            }),
        );
        assert.deepEqual(summary.failures, { total: 2, malformed: 2, http: 0, network: 0, timeout: 0 });
    } finally {
        await server.close();
    }
});

test("--server forms: NAME=URL names the server; other schemes are refused with the form expected", () => {
    assert.equal(createDraftClient("base=http://127.0.0.1:9000").name, "base");
    assert.equal(createDraftClient("ref=llama-server+http://127.0.0.1:8080").url, "llama-server+http://127.0.0.1:8080");
    assert.throws(() => createDraftClient("ftp://127.0.0.1:1"), /expected an http\(s\) URL/);
    assert.throws(() => createDraftClient("127.0.0.1:8000"), /expected/);
});
