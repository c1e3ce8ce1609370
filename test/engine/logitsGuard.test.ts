/**
 * The logits race guard. After a decode whose outputs llama.cpp computed out of batch order, it reorders the logits
 * buffer lazily, on the first logits access (llama_context::output_reorder). Reading logits from several threads at
 * once — as node-llama-cpp 3.21.1's per-sequence sampling does — runs that reorder concurrently and gives wrong,
 * run-to-run different drafts. The native engine fetches every output row on one thread before its parallel argmax.
 *
 * This test makes llama.cpp reorder outputs at every step (requests batched in arrival order, conversations arriving
 * in shuffled slot order) and checks that every draft still equals the draft computed alone. It FAILS without the
 * guard: run it by hand with SPECDRAFT_TEST_UNGUARDED_LOGITS=1 `node --import tsx --test test/engine/logitsGuard.test.ts`,
 * which hands the engine `testing.unguardedLogits` (checked on a 2-core machine, 2026-11-30: 153, 154, 154 and 179 of
 * 192 drafts wrong in four runs; 0 with the guard).
 */

import assert from "node:assert/strict";
import { test } from "node:test";
import { seededRandom } from "../../bench/lib/seededRandom.js";
import { loadEngine } from "../../src/engine/loadEngine.js";
import { nextRequest } from "./helpers/conversations.js";
import { loadDifferentialEngine } from "./helpers/differentialEngine.js";
import { randomPrompts, testGpu, testThreads, tinyModel } from "./helpers/engineFixtures.js";

/** The test's own switch (kept by test/helpers/isolateEnv.ts): draft without the guard, to see this test fail. */
const unguardedLogits = process.env.SPECDRAFT_TEST_UNGUARDED_LOGITS === "1";

test("drafts stay exact when llama.cpp reorders the outputs of every step", async (t) => {
    const streams = 32;
    const n = 16;
    const rounds = 6;
    const common = { modelPath: tinyModel, contextSize: 1024, gpu: testGpu, threads: testThreads };
    const alone = await loadEngine({ ...common, streams: 1, lookahead: 0 });
    t.after(() => alone.close());
    // with a twin that drafts with candidates (several outputs per sequence, reordered too), compared draft by draft
    const batched = await loadDifferentialEngine({
        ...common,
        streams,
        testing: { arrivalOrder: true, unguardedLogits },
    });
    t.after(() => batched.close());

    const random = seededRandom(77);
    let requests = randomPrompts(streams, 4000, 61);
    let wrong = 0;
    for (let r = 0; r < rounds; r++) {
        // conversations arrive in a shuffled order, so their KV slots are out of order within the batch
        const arrivals = shuffle(
            requests.map((request, i) => ({ i, request })),
            random,
        );
        const drafted = await Promise.all(
            arrivals.map(async ({ i, request }) => ({ i, request, draft: await batched.draft(request, n) })),
        );
        drafted.sort((a, b) => a.i - b.i);
        for (const { request, draft } of drafted) {
            const expected = await alone.draft(request, n);
            if (draft.join(",") !== expected.join(",")) wrong++;
        }
        requests = drafted.map(({ request, draft }) => nextRequest(request, draft, random, 4000));
    }
    assert.equal(
        wrong,
        0,
        `${wrong} of ${rounds * streams} batched drafts differ from the same requests drafted alone`,
    );
});

/** A copy of `items` in an order drawn from `random` (Fisher–Yates: one draw per position, last to second). */
function shuffle<T>(items: readonly T[], random: (max: number) => number): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
        const j = random(i + 1);
        const [a, b] = [out[i], out[j]];
        if (a === undefined || b === undefined) throw new RangeError(`shuffle: no item at ${i} or ${j}`);
        [out[i], out[j]] = [b, a];
    }
    return out;
}
