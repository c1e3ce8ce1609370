/**
 * Drafts over HTTP: against a real in-process specdraft server (the native engine serving the target's own GGUF,
 * so drafts are accepted), a server with another vocabulary (refused), a closed port and a server that answers 500
 * or garbage (both degrade to the target alone with a warning and still give the identical output).
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { PassThrough } from "node:stream";
import { after, before, test } from "node:test";
import type { Llama } from "node-llama-cpp";
import { conversationHeader } from "../../src/client/conversationKey.js";
import { defaultLookahead } from "../../src/engine/engineDefaults.js";
import { readModelFileInfo } from "../../src/engine/gguf.js";
import { loadEngine } from "../../src/engine/loadEngine.js";
import { type RunGenerateOptions, runGenerate } from "../../src/generate/runGenerate.js";
import { GenerateError, type GenerateSummary } from "../../src/generate/types.js";
import { type RunningServer, startServer } from "../../src/server/startServer.js";
import { assertLossless } from "../helpers/assertLossless.js";
import { defined } from "../helpers/defined.js";
import { cpuLlama, otherVocabModel, targetModel, testPrompts, testThreads } from "./testModels.js";

let llama: Llama;
before(async () => {
    llama = await cpuLlama();
});
after(async () => {
    await llama.dispose();
});

const maxTokens = 32;
const draftLength = 5;

async function serve(modelPath: string): Promise<RunningServer> {
    const io = { out: new PassThrough().resume(), err: new PassThrough().resume() };
    const server = await startServer(
        {
            modelPath,
            host: "127.0.0.1",
            port: 0,
            draftLength,
            streams: 2,
            contextSize: 512,
            gpu: "cpu",
            maxQueue: 16,
            bodyLimit: 1024 * 1024,
            logRequests: false,
        },
        (options) => loadEngine({ ...options, threads: testThreads }),
        io,
    );
    try {
        await server.ready;
    } catch (error) {
        await server.close();
        throw error;
    }
    return server;
}

async function generateWith(
    url: string,
    more: Partial<RunGenerateOptions> = {},
): Promise<{ summary: GenerateSummary; warnings: string[] }> {
    const warnings: string[] = [];
    const summary = await runGenerate({
        target: targetModel,
        draft: { kind: "http", url },
        prompts: testPrompts,
        maxTokens,
        draftLength,
        gpu: "cpu",
        threads: testThreads,
        timeoutMs: 2000,
        llama,
        onWarning: (message) => warnings.push(message),
        ...more,
    });
    return { summary, warnings };
}

test("a real specdraft server serving the target itself: identical output, drafts accepted", async () => {
    const server = await serve(targetModel);
    try {
        const { summary, warnings } = await generateWith(server.url);
        assert.deepEqual(warnings, []);
        assertLossless(summary);
        assert.equal(summary.draft.kind, "http");
        assert.equal(summary.draft.vocabFingerprint, summary.target.vocabFingerprint);
        // the server's GET /info and generate's own reading of the same GGUF name its quantization alike
        assert.equal(summary.draft.quantization, summary.target.quantization);
        // and its candidates a lone request's steps check (the CPU's default budget)
        const { candidates, stepTokens } = defaultLookahead.cpu;
        assert.equal(summary.settings.draftLookahead, Math.min(candidates, stepTokens - 1));
        assert.ok(summary.speculative.accepted > 0, "the server's drafts are accepted");
        assert.ok(summary.tau > draftLength - 1, `τ ${summary.tau} with the target as drafter`);
    } finally {
        await server.close();
    }
});

test("a server with another vocabulary is refused with a message naming it", async () => {
    const server = await serve(otherVocabModel);
    try {
        await assert.rejects(generateWith(server.url), (error: unknown) => {
            assert.ok(error instanceof GenerateError);
            assert.equal(error.code, "vocab_mismatch");
            assert.ok(error.message.includes(server.url));
            return true;
        });
    } finally {
        await server.close();
    }
});

/** Listens on a free loopback port with `handler`; returns its URL and a close function. */
async function fakeServer(
    handler: Parameters<typeof createServer>[1],
): Promise<{ url: string; close: () => Promise<void> }> {
    const server: Server = createServer(handler);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    return {
        url: `http://127.0.0.1:${port}`,
        close: () => new Promise<void>((resolve) => server.close(() => resolve())),
    };
}

/** A fake drafter: GET /info names the target's vocabulary, every other request is a draft answered `answer`. */
async function fakeDrafter(answer: { status: number; body: string }) {
    const target = await readModelFileInfo(targetModel);
    let draftRequests = 0;
    /** Each draft request's conversation header, in order. */
    const keys: unknown[] = [];
    const server = await fakeServer((request, response) => {
        request.resume();
        response.setHeader("content-type", "application/json");
        if (request.url === "/info") {
            response.end(
                JSON.stringify({
                    model: "fake",
                    vocab_size: target.vocabSize,
                    vocab_fingerprint: target.vocabFingerprint,
                }),
            );
            return;
        }
        draftRequests++;
        keys.push(request.headers[conversationHeader]);
        response.statusCode = answer.status;
        response.end(answer.body);
    });
    /** Draft requests since the last call. */
    const takeRequests = () => {
        const n = draftRequests;
        draftRequests = 0;
        return n;
    };
    return { ...server, takeRequests, keys };
}

test("a closed port: a warning, then the target alone, identical output", async () => {
    // a port that was free a moment ago and is closed now
    const closed = await fakeServer((_, response) => response.end());
    await closed.close();
    const { summary, warnings } = await generateWith(closed.url);
    assert.equal(warnings.length, 1);
    assert.match(defined(warnings[0], "the warning"), /not answering .*ECONNREFUSED.*target alone/);
    assertLossless(summary);
    assert.equal(summary.speculative.drafted, 0);
    assert.deepEqual(summary.warnings, warnings);
});

for (const [name, draftAnswer] of [
    ["HTTP 500", { status: 500, body: '{"error":{"code":"internal","message":"boom"}}' }],
    ["garbage", { status: 200, body: "<html>not json</html>" }],
    ["ids outside the vocabulary", { status: 200, body: '{"draft":[1,2,99999999]}' }],
] as const) {
    test(`a drafter answering ${name}: a warning, then the target alone, identical output`, async () => {
        const server = await fakeDrafter(draftAnswer);
        try {
            const { summary, warnings } = await generateWith(server.url);
            assert.equal(warnings.length, 1, JSON.stringify(warnings));
            assert.match(defined(warnings[0], "the warning"), /failed .*target alone/);
            assert.equal(server.takeRequests(), 1, "after the first failure no more drafts are asked for");
            assertLossless(summary);
            assert.equal(summary.speculative.accepted, 0);
        } finally {
            await server.close();
        }
    });
}

test("the warm-up generates the first prompt untimed in both modes before the measured runs", async () => {
    const server = await fakeDrafter({ status: 200, body: '{"draft":[1,2]}' });
    try {
        const requestsWith = async (warmup: number) => {
            server.takeRequests();
            const { summary } = await generateWith(server.url, { warmup });
            assertLossless(summary);
            assert.equal(summary.settings.warmup, warmup);
            return { requests: server.takeRequests(), summary };
        };
        const cold = await requestsWith(0);
        // one draft request per target step of the measured runs but each prompt's own step, none for the target alone
        assert.equal(cold.requests, cold.summary.speculative.targetSteps - cold.summary.prompts.length);
        const warm = await requestsWith(1);
        // the measured runs are the same; the warm-up added one speculative generation of the first prompt
        assert.deepEqual(
            warm.summary.prompts.map((p) => defined(p.speculative[0], `${p.id}'s run`).tokens),
            cold.summary.prompts.map((p) => defined(p.speculative[0], `${p.id}'s run`).tokens),
        );
        const first = defined(defined(cold.summary.prompts[0], "the first prompt").speculative[0], "its run");
        assert.equal(warm.requests - cold.requests, first.targetSteps - 1);
    } finally {
        await server.close();
    }
});

test("each generation sends one conversation key with all its drafts, and the next generation another", async () => {
    const server = await fakeDrafter({ status: 200, body: '{"draft":[1,2]}' });
    try {
        const { summary } = await generateWith(server.url, { warmup: 1 });
        assertLossless(summary);
        // generations run one after another, so each key's requests are one run: the warm-up, then every prompt
        const runs = server.keys.filter((key, i) => key !== server.keys[i - 1]);
        assert.ok(
            runs.every((key) => typeof key === "string"),
            JSON.stringify(runs),
        );
        assert.equal(new Set(runs).size, runs.length, "a key came back after another generation's");
        assert.equal(runs.length, 1 + summary.prompts.length);
    } finally {
        await server.close();
    }
});
