/** Failed, timed-out and garbage answers are counted by kind and scored as empty drafts (a = 0), never thrown. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { createDraftClient } from "../../src/client/createDraftClient.js";
import { summarizeWalk } from "../../src/validate/summarizeWalk.js";
import { walkHeldOut } from "../../src/validate/walkHeldOut.js";
import { conversation, draftWithPlantedError, locate } from "../helpers/continuationOracle.js";
import { sendJson, startFakeServer } from "../helpers/startFakeServer.js";

test("HTTP errors, timeouts, non-JSON, wrong shapes and over-long drafts each count once per step and score a = 0", async () => {
    // every step of these fails, so each advances 1 token: steps = L
    const failing = {
        http500: conversation("http500", 1, 3),
        notJson: conversation("notJson", 2, 2),
        badIds: conversation("badIds", 3, 2),
        noDraft: conversation("noDraft", 4, 2),
        tooLong: conversation("tooLong", 5, 2),
        slow: conversation("slow", 6, 2),
    };
    // fails only its first request, then drafts perfectly: L = 10, k = 4:
    // pos 0: a = 0 → 1; pos 1: a = 4 → 6; pos 6: cap 4, a = 4, advance min(5, 4) = 4 → 10. 3 steps
    const recovering = conversation("recovering", 7, 10);
    // long enough that a busy machine never turns a good answer into a timeout; only "slow" waits it out
    const timeoutMs = 1_500;
    const all = [...Object.values(failing), recovering];
    let recoveringRequests = 0;
    const server = await startFakeServer(async (_path, body, response) => {
        const { tokens, n } = body as { tokens: number[]; n: number };
        const hit = locate(all, tokens);
        if (!hit) return sendJson(response, 400, {});
        const truth = draftWithPlantedError(hit.conversation, hit.position, n, undefined);
        switch (hit.conversation.id) {
            case "http500":
                return sendJson(response, 500, { error: { code: "boom", message: "no" } });
            case "notJson":
                response.end("<html>oops</html>");
                return;
            case "badIds":
                return sendJson(response, 200, { draft: truth.map(String) });
            case "noDraft":
                return sendJson(response, 200, { tokens: truth });
            case "tooLong":
                return sendJson(response, 200, { draft: [...truth, 1, 2] });
            case "slow":
                // never answers; closing the server drops the connection
                return;
            default:
                recoveringRequests++;
                if (recoveringRequests === 1)
                    return sendJson(response, 503, { error: { code: "queue_full", message: "busy" } });
                return sendJson(response, 200, { draft: truth });
        }
    });
    try {
        const result = await walkHeldOut(all, createDraftClient(server.url, timeoutMs), {
            draftLength: 4,
            concurrency: 8,
        });
        const steps = Object.fromEntries(result.conversations.map((c) => [c.id, c.steps.length]));
        assert.deepEqual(steps, { http500: 3, notJson: 2, badIds: 2, noDraft: 2, tooLong: 2, slow: 2, recovering: 3 });
        for (const walk of result.conversations.filter((c) => c.id !== "recovering"))
            assert.ok(walk.steps.every((s) => s.accepted === 0 && s.failure !== undefined));
        assert.deepEqual(
            result.conversations.find((c) => c.id === "recovering")?.steps.map((s) => [s.accepted, s.failure ?? "ok"]),
            [
                [0, "http"],
                [4, "ok"],
                [4, "ok"],
            ],
        );
        const summary = summarizeWalk(result);
        assert.deepEqual(summary.failures, {
            total: 14,
            http: 3 + 1,
            malformed: 2 + 2 + 2 + 2,
            timeout: 2,
            network: 0,
        });
        assert.equal(summary.tokens, 3 + 2 * 5 + 10);
        assert.equal(summary.steps, 3 + 2 * 5 + 3);
        assert.equal(summary.acceptance_histogram[0], 14);
        assert.ok((summary.latency_ms.max ?? 0) >= timeoutMs, "a timed-out request's latency is at least the timeout");
    } finally {
        await server.close();
    }
});

test("an unreachable server gives network failures, scored as empty drafts", async () => {
    const server = await startFakeServer((_path, _body, response) => sendJson(response, 200, {}));
    const url = server.url;
    await server.close();
    const summary = summarizeWalk(
        await walkHeldOut([conversation("c", 1, 3)], createDraftClient(url, 2_000), { draftLength: 4, concurrency: 1 }),
    );
    assert.equal(summary.steps, 3);
    assert.equal(summary.tau, 1);
    assert.deepEqual(summary.failures, { total: 3, network: 3, http: 0, malformed: 0, timeout: 0 });
});
