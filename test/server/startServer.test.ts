/**
 * startServer over a real loopback port with a FakeEngine: listen first and load after (/health 503 → 200), a client
 * that disconnects mid-draft frees its work, and the body limit answers 413.
 */

import assert from "node:assert/strict";
import http from "node:http";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { test } from "node:test";
import { readModelFileInfo } from "../../src/engine/gguf.js";
import type { LoadEngineOptions } from "../../src/engine/loadEngine.js";
import { type EngineLoader, type ServeOptions, startServer } from "../../src/server/startServer.js";
import { FakeEngine } from "./FakeEngine.js";
import { repoRoot } from "./serveProcess.js";
import { testServeOptions } from "./testServeOptions.js";

const model = join(repoRoot, "test/fixtures/tiny-qwen3.gguf");

function serveOptions(overrides: Partial<ServeOptions> = {}): ServeOptions {
    return testServeOptions(model, overrides);
}

function quietIo() {
    const out = new PassThrough();
    const err = new PassThrough();
    let text = "";
    out.setEncoding("utf8").on("data", (chunk: string) => (text += chunk));
    err.resume();
    return { io: { out, err }, stdout: () => text };
}

/** A loader whose FakeEngine is made (with the server's observer) only when `load()` is called. */
function gatedLoader() {
    let engine: FakeEngine | undefined;
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const loader: EngineLoader = async ({ observer, contextSize }) => {
        await gate;
        engine = new FakeEngine({ observer, contextSize });
        return engine;
    };
    const loaded = (): FakeEngine => {
        assert.ok(engine, "the engine is loaded");
        return engine;
    };
    return { loaded, loader, load: open };
}

test("listens before loading: /health is 503 loading, then 200 ok after warm-up; the URL is printed when ready", async () => {
    const { loaded, loader, load } = gatedLoader();
    const { io, stdout } = quietIo();
    const server = await startServer(serveOptions(), loader, io);
    try {
        const loading = await fetch(`${server.url}/health`);
        assert.equal(loading.status, 503);
        assert.deepEqual(await loading.json(), { status: "loading" });
        assert.equal(stdout(), "");

        load();
        await server.ready;
        const engine = loaded();
        const ok = await fetch(`${server.url}/health`);
        assert.equal(ok.status, 200);
        assert.deepEqual(await ok.json(), { status: "ok" });
        assert.deepEqual(engine.calls[0], { tokens: [0], n: 1, endId: undefined }, "warm-up: one tiny draft");
        assert.match(stdout(), new RegExp(`serving fake .* at ${server.url.replaceAll(".", "\\.")}\\n$`));
    } finally {
        await server.close();
    }
    assert.equal(loaded().closed, true, "close() closes the engine");
});

test("the engine loader is handed the header serve read before listening, so the file is read once", async () => {
    let handed: LoadEngineOptions["modelFile"];
    const loader: EngineLoader = async (options) => {
        handed = options.modelFile;
        return new FakeEngine({ observer: options.observer, contextSize: options.contextSize });
    };
    const server = await startServer(serveOptions(), loader, quietIo().io);
    try {
        await server.ready;
        assert.deepEqual(handed, await readModelFileInfo(model));
    } finally {
        await server.close();
    }
});

test("a client that disconnects mid-draft frees its work; the server keeps serving", async () => {
    const { loaded, loader, load } = gatedLoader();
    load();
    const server = await startServer(serveOptions(), loader, quietIo().io);
    try {
        await server.ready;
        const engine = loaded();
        engine.hold();
        const { port } = new URL(server.url);
        const request = http.request({
            host: "127.0.0.1",
            port,
            method: "POST",
            path: "/draft",
            headers: { "content-type": "application/json" },
        });
        const clientError = new Promise((resolve) => request.on("error", resolve));
        request.end(JSON.stringify({ tokens: [7, 8, 9], n: 8 }));
        await engine.started();
        request.destroy();
        await clientError;
        await engine.abortSeen();
        assert.equal(engine.aborted, 1);
        engine.release();

        const res = await fetch(`${server.url}/draft`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ tokens: [7], n: 2 }),
        });
        assert.deepEqual(await res.json(), { draft: [8, 9] });
    } finally {
        await server.close();
    }
});

test("a body over --body-limit answers 413 body_too_large over the socket; smaller bodies still work", async () => {
    const { loader, load } = gatedLoader();
    load();
    const server = await startServer(serveOptions({ bodyLimit: 1000 }), loader, quietIo().io);
    try {
        await server.ready;
        const big = JSON.stringify({ tokens: Array.from({ length: 600 }, () => 1) });
        assert.ok(big.length > 1000);
        const res = await fetch(`${server.url}/draft`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: big,
        });
        assert.equal(res.status, 413);
        assert.deepEqual(await res.json(), {
            error: { code: "body_too_large", message: "Request body too large: expected at most 1000 bytes." },
        });
        const small = await fetch(`${server.url}/draft`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ tokens: [1], n: 1 }),
        });
        assert.deepEqual(await small.json(), { draft: [2] });
    } finally {
        await server.close();
    }
});
