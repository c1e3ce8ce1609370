/**
 * The walk's arithmetic against deterministic fake specdraft servers whose drafts are the true continuation with a
 * planted error. Expected steps, histograms and rates are worked out by hand from the rule in the comments.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { conversationHeader } from "../../src/client/conversationKey.js";
import { createDraftClient } from "../../src/client/createDraftClient.js";
import { defaultDraftLength } from "../../src/engine/engineDefaults.js";
import { summarizeWalk } from "../../src/validate/summarizeWalk.js";
import { defaultConcurrency, walkHeldOut } from "../../src/validate/walkHeldOut.js";
import { conversation, draftWithPlantedError, locate } from "../helpers/continuationOracle.js";
import { sendJson, startFakeServer } from "../helpers/startFakeServer.js";

// k = 4 throughout.
//  c1: L = 10, error at draft index 2 → a = 2, advance 3 per step: pos 0 → 3 → 6 → 9; at pos 9 the cap is
//      min(4, 1) = 1 and d[0] is right → a = 1, advance 1 → 10.  steps (a, cap): (2,4) (2,4) (2,4) (1,1) = 4 steps
//  c2: L = 17, no error → advance k + 1 = 5: pos 0 → 5 → 10 → 15; at 15 cap = 2, a = 2, advance 2 → 17.
//      steps: (4,4) (4,4) (4,4) (2,2) = 4 steps
//  c3: L = 5, error at index 0 → a = 0, advance 1: caps 4, 4, 3, 2, 1 = 5 steps
//  c4: L = 1, no error → cap 1, a = 1, advance 1 = 1 step
//  c5: L = 0 → no steps (left out of τ-macro)
const conversations = [
    conversation("c1", 1, 10, "code"),
    conversation("c2", 2, 17, "code"),
    conversation("c3", 3, 5, "chat"),
    conversation("c4", 4, 1),
    conversation("c5", 5, 0),
];
const errorAt: Record<string, number | undefined> = { c1: 2, c2: undefined, c3: 0, c4: undefined, c5: undefined };

test("τ, τ-macro, histogram, per-position and per-category figures match the rule worked by hand", async () => {
    const server = await startFakeServer((path, body, response) => {
        const { tokens, n } = body as { tokens: number[]; n: number };
        const hit = locate(conversations, tokens);
        if (path !== "/draft" || !hit)
            return sendJson(response, 400, { error: { code: "unknown", message: "not a test prompt" } });
        sendJson(response, 200, {
            draft: draftWithPlantedError(hit.conversation, hit.position, n, errorAt[hit.conversation.id]),
        });
    });
    try {
        const client = createDraftClient(server.url, 5_000);
        const result = await walkHeldOut(conversations, client, { draftLength: 4, concurrency: 3 });
        assert.deepEqual(
            result.conversations.map((c) => c.steps.length),
            [4, 4, 5, 1, 0],
        );
        assert.deepEqual(
            result.conversations[0]?.steps.map((s) => [s.accepted, s.cap]),
            [
                [2, 4],
                [2, 4],
                [2, 4],
                [1, 1],
            ],
        );
        assert.deepEqual(
            result.conversations[2]?.steps.map((s) => s.cap),
            [4, 4, 3, 2, 1],
        );

        const summary = summarizeWalk(result);
        assert.equal(summary.tokens, 33); // 10 + 17 + 5 + 1 + 0
        assert.equal(summary.steps, 14); // 4 + 4 + 5 + 1
        assert.equal(summary.tau, 33 / 14);
        assert.equal(summary.tau_macro_over_prompts, (10 / 4 + 17 / 4 + 5 / 5 + 1 / 1) / 4);
        // chat 5/5, code 27/8, uncategorized (c4, c5) 1/1: each category counts once
        assert.equal(summary.tau_macro_over_categories, (1 + 27 / 8 + 1) / 3);
        assert.equal(summary.samples, 5);
        assert.equal(summary.draft_tokens, 4);
        // a = 0: c3 ×5; a = 1: c1's last, c4; a = 2: c1 ×3, c2's last; a = 4: c2 ×3
        assert.deepEqual(summary.acceptance_histogram, [5, 2, 4, 0, 3]);
        // position i is checked when a ≥ i and i < cap; it is accepted when a > i
        assert.deepEqual(
            summary.per_position_acceptance.map((p) => [p.attempts, p.accepted]),
            [
                [14, 9], // every step checks d[0]; all but c3's five accept it
                [7, 7], // c1 ×3 (cap 4) and c2 ×4; c1's last and c4 have cap 1
                [6, 3], // c1 ×3 (a = 2 stops here) and c2's three full steps
                [3, 3], // c2's three full steps
            ],
        );
        assert.deepEqual(
            summary.per_position_acceptance.map((p) => p.rate),
            [9 / 14, 1, 0.5, 1],
        );
        assert.deepEqual(summary.per_category, {
            chat: { tau: 1, tokens: 5, steps: 5, samples: 1 },
            code: { tau: 27 / 8, tokens: 27, steps: 8, samples: 2 },
            uncategorized: { tau: 1, tokens: 1, steps: 1, samples: 2 },
        });
        assert.equal(summary.failures.total, 0);
        assert.equal(summary.requests, 14);
        assert.equal(server.requests.length, 14);
        assert.ok(
            summary.latency_ms.p50 !== null &&
                summary.latency_ms.p95 !== null &&
                summary.latency_ms.p50 <= summary.latency_ms.p95,
        );
        assert.equal(
            summary.latency_histogram_ms.counts.reduce((a, b) => a + b, 0),
            14,
        );
    } finally {
        await server.close();
    }
});

test("each conversation's requests extend its own context in order and carry its own key, also when walked concurrently", async () => {
    const keysOf = new Map<string, Set<unknown>>();
    const server = await startFakeServer(async (_path, body, response, request) => {
        const { tokens, n } = body as { tokens: number[]; n: number };
        const hit = locate(conversations, tokens);
        if (hit)
            keysOf.set(
                hit.conversation.id,
                (keysOf.get(hit.conversation.id) ?? new Set()).add(request.headers[conversationHeader]),
            );
        // answer in a scrambled order so concurrent conversations interleave
        await new Promise((resolve) => setTimeout(resolve, (tokens.length * 7) % 5));
        if (!hit) return sendJson(response, 400, {});
        sendJson(response, 200, {
            draft: draftWithPlantedError(hit.conversation, hit.position, n, errorAt[hit.conversation.id]),
        });
    });
    try {
        await walkHeldOut(conversations, createDraftClient(server.url, 5_000), { draftLength: 4, concurrency: 5 });
        const positions = new Map<string, number[]>();
        for (const { body } of server.requests) {
            const hit = locate(conversations, (body as { tokens: number[] }).tokens);
            assert.ok(hit, "every request is a test prompt plus a continuation prefix");
            positions.set(hit.conversation.id, [...(positions.get(hit.conversation.id) ?? []), hit.position]);
            assert.equal((body as { n: number }).n, 4);
        }
        // c1 advances 3 per step, c2 5, c3 1 (see the first test)
        assert.deepEqual(positions.get("c1"), [0, 3, 6, 9]);
        assert.deepEqual(positions.get("c2"), [0, 5, 10, 15]);
        assert.deepEqual(positions.get("c3"), [0, 1, 2, 3, 4]);
        assert.deepEqual(positions.get("c4"), [0]);
        assert.equal(positions.has("c5"), false);
        // one conversation key per conversation (what a proxy keeps on one replica), a different one for each
        const keys = [...keysOf.values()].map((set) => [...set]);
        assert.ok(
            keys.every((set) => set.length === 1 && typeof set[0] === "string"),
            JSON.stringify(keys),
        );
        assert.equal(new Set(keys.flat()).size, 4);
    } finally {
        await server.close();
    }
});

test("at the default draft length (16) a perfect drafter advances 17 tokens per step", async () => {
    const long = [conversation("long", 1, 40)];
    const server = await startFakeServer((_path, body, response) => {
        const { tokens, n } = body as { tokens: number[]; n: number };
        const hit = locate(long, tokens);
        sendJson(response, 200, {
            draft: hit ? draftWithPlantedError(hit.conversation, hit.position, n, undefined) : [],
        });
    });
    try {
        const summary = summarizeWalk(
            await walkHeldOut(long, createDraftClient(server.url), {
                draftLength: defaultDraftLength,
                concurrency: defaultConcurrency,
            }),
        );
        // pos 0 → 17 → 34 → 40 (cap 6 at the end)
        assert.equal(summary.steps, 3);
        assert.equal(summary.tau, 40 / 3);
        assert.equal(summary.acceptance_histogram.length, 17);
        assert.deepEqual(
            server.requests.map((r) => (r.body as { n: number }).n),
            [16, 16, 16],
        );
    } finally {
        await server.close();
    }
});
