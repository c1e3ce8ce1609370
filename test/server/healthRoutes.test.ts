/** GET /health and the engine slot: loading → ok → stopping, and what the other routes answer meanwhile. */

import assert from "node:assert/strict";
import { test } from "node:test";
import { buildApp } from "../../src/server/buildApp.js";
import { FakeEngine } from "./FakeEngine.js";
import { serveAppDefaults } from "./testApp.js";

test("503 loading until the engine is in the slot, then 200 ok, then 503 stopping", async () => {
    const { app, slot } = buildApp(serveAppDefaults);
    try {
        const loading = await app.inject({ method: "GET", url: "/health" });
        assert.equal(loading.statusCode, 503);
        assert.deepEqual(loading.json(), { status: "loading" });

        const draftWhileLoading = await app.inject({ method: "POST", url: "/draft", payload: { tokens: [1] } });
        assert.equal(draftWhileLoading.statusCode, 503);
        assert.equal(draftWhileLoading.json().error.code, "model_loading");
        assert.equal(draftWhileLoading.headers["retry-after"], "1");
        const infoWhileLoading = await app.inject({ method: "GET", url: "/info" });
        assert.equal(infoWhileLoading.json().error.code, "model_loading");
        assert.equal((await app.inject({ method: "GET", url: "/metrics" })).statusCode, 200);

        slot.fill(new FakeEngine());
        const ok = await app.inject({ method: "GET", url: "/health" });
        assert.equal(ok.statusCode, 200);
        assert.deepEqual(ok.json(), { status: "ok" });
        assert.deepEqual((await app.inject({ method: "POST", url: "/draft", payload: { tokens: [1], n: 1 } })).json(), {
            draft: [2],
        });

        slot.stop();
        const stopping = await app.inject({ method: "GET", url: "/health" });
        assert.equal(stopping.statusCode, 503);
        assert.deepEqual(stopping.json(), { status: "stopping" });
        const draftWhileStopping = await app.inject({ method: "POST", url: "/draft", payload: { tokens: [1] } });
        assert.equal(draftWhileStopping.statusCode, 503);
        assert.equal(draftWhileStopping.json().error.code, "shutting_down");
    } finally {
        await app.close();
    }
});

test("a loading server answers 503 before reading the body, even a malformed one", async () => {
    const { app } = buildApp(serveAppDefaults);
    try {
        const res = await app.inject({
            method: "POST",
            url: "/draft",
            payload: "{not json",
            headers: { "content-type": "application/json" },
        });
        assert.equal(res.statusCode, 503);
        assert.equal(res.json().error.code, "model_loading");
    } finally {
        await app.close();
    }
});
