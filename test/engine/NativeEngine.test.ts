/**
 * The native engine on the CPU with the tiny Qwen3 fixture: drafts are the model's greedy continuation whatever else
 * is in the batch or the cache — the same as drafts alone, up to near ties of the model's own logits where the decode
 * shapes differ (../helpers/nearTies.ts); endId, errors, abort, queue_full and close behave as DraftEngine promises.
 * Every draft is also drafted by a twin with prompt-lookup candidates in every step, and must come out the same by the
 * same rule (helpers/differentialEngine.ts).
 */

import assert from "node:assert/strict";
import { test } from "node:test";
import { seededRandom } from "../../bench/lib/seededRandom.js";
import { EngineError } from "../../src/engine/errors.js";
import type { LoadEngineOptions } from "../../src/engine/loadEngine.js";
import type { DraftEngine } from "../../src/engine/types.js";
import { assertDraftsAgree, draftPairs } from "../helpers/nearTies.js";
import { draftConversationsAlone, nextRequest } from "./helpers/conversations.js";
import { loadDifferentialEngine } from "./helpers/differentialEngine.js";
import { randomPrompts, testGpu, testThreads, tinyModel } from "./helpers/engineFixtures.js";

const contextSize = 512;

interface Counters {
    evaluated: number;
    reused: number;
    decodes: [tokens: number, sequences: number][];
    maxQueueDepth: number;
    depths: number[];
}

async function openEngine(
    t: { after(fn: () => Promise<void>): void },
    options: Partial<LoadEngineOptions> = {},
): Promise<{ engine: DraftEngine; counters: Counters }> {
    const counters: Counters = { evaluated: 0, reused: 0, decodes: [], maxQueueDepth: 0, depths: [] };
    const engine = await loadDifferentialEngine({
        modelPath: tinyModel,
        streams: 1,
        contextSize,
        gpu: testGpu,
        threads: testThreads,
        observer: {
            onPrefix: (evaluated, reused) => {
                counters.evaluated += evaluated;
                counters.reused += reused;
            },
            onStep: ({ tokens, sequences }) => counters.decodes.push([tokens, sequences]),
            onQueueDepth: (depth) => {
                counters.maxQueueDepth = Math.max(counters.maxQueueDepth, depth);
                counters.depths.push(depth);
            },
        },
        ...options,
    });
    t.after(() => engine.close());
    return { engine, counters };
}

function isEngineError(code: string): (error: unknown) => boolean {
    return (error: unknown) => {
        assert.ok(error instanceof EngineError, `expected EngineError ${code}, got ${String(error)}`);
        assert.equal(error.code, code);
        return true;
    };
}

test("info describes the loaded drafter", async (t) => {
    const { engine } = await openEngine(t, { streams: 4 });
    assert.equal(engine.info.engine, "native");
    assert.equal(engine.info.backend, testGpu);
    assert.equal(engine.info.streams, 4);
    assert.equal(engine.info.contextSize, contextSize);
    assert.equal(engine.info.vocabSize, 4003);
    // off on the CPU (it made batched drafts differ there), on for GPUs
    assert.equal(engine.info.flashAttention, testGpu !== "cpu");
    assert.equal(engine.info.quantization, "Q8_0");
    assert.ok(engine.info.fileBytes > 100_000);
});

test("a draft alone == the same request among 32 concurrent ones == the same request after prefix reuse", async (t) => {
    // On the CPU this also guards the flash-attention default: with flashAttention: true, some of these batched
    // drafts differ from the drafts computed alone (seen with this fixture: 2 of 32).
    const prompts = randomPrompts(32, 4000, 11);
    const n = 16;
    const rounds = 3;
    const alone = await openEngine(t);
    const reference = await draftConversationsAlone(alone.engine, prompts, rounds, n, 5);
    assert.equal(alone.counters.reused, 0, "the reference engine must not reuse prefixes");
    // drafts vary from prompt to prompt (a model that always says the same thing would prove nothing)
    assert.ok(new Set(reference[0]?.drafts.map((d) => d.join(","))).size > 28);

    const batched = await openEngine(t, { streams: 32 });
    const tokenCount = (requests: readonly number[][]) => requests.reduce((sum, request) => sum + request.length, 0);
    let previous: readonly number[][] = [];
    for (const [r, { requests, drafts: expected }] of reference.entries()) {
        const before = { ...batched.counters };
        const drafts = await Promise.all(requests.map((request) => batched.engine.draft(request, n)));
        await assertDraftsAgree(tinyModel, draftPairs(requests, expected, drafts), `round ${r}, batched`, testGpu);
        const evaluated = batched.counters.evaluated - before.evaluated;
        const reused = batched.counters.reused - before.reused;
        assert.equal(evaluated + reused, tokenCount(requests));
        if (r === 0) {
            assert.equal(reused, 0);
        } else {
            // each conversation evaluates only what follows its cached context: accepted draft tokens + 1
            assert.ok(evaluated <= requests.length * (n + 1), `round ${r}: evaluated ${evaluated} tokens`);
            assert.ok(reused >= tokenCount(previous), `round ${r}: reused only ${reused} tokens`);
        }
        previous = requests;
    }
    // one decode per step for all 32 sequences (plus the prefill), not one per sequence
    const steps = batched.counters.decodes.filter(([tokens, sequences]) => tokens === 32 && sequences === 32);
    assert.ok(
        steps.length >= rounds * (n - 1),
        `expected batched steps, got ${JSON.stringify(batched.counters.decodes.slice(0, 20))}`,
    );
    assert.ok(batched.counters.maxQueueDepth >= 32);
});

test("requests joining while others draft (prefill and draft steps in one decode) get the same drafts as alone", async (t) => {
    const prompts = randomPrompts(16, 4000, 17);
    const [carrier, tick] = randomPrompts(2, 4000, 19);
    assert.ok(carrier && tick);
    const alone = await openEngine(t);
    const expected: number[][] = [];
    for (const prompt of prompts) expected.push(await alone.engine.draft(prompt, 24));
    const batched = await openEngine(t, { streams: 17 });
    // A long "carrier" draft is certainly in flight (a 2-token tick beside it has resolved) when the requests start
    // arriving, so at least the first one's prefill shares a decode with draft steps whatever the CPU's speed.
    const carried = batched.engine.draft(carrier, 300);
    await batched.engine.draft(tick, 2);
    const drafts: Promise<number[]>[] = [];
    for (const prompt of prompts) {
        drafts.push(batched.engine.draft(prompt, 24));
        // let a step or two run before the next request arrives
        await new Promise((resolve) => setTimeout(resolve, 2));
    }
    await assertDraftsAgree(tinyModel, draftPairs(prompts, expected, await Promise.all(drafts)), "joined", testGpu);
    assert.equal((await carried).length, 300);
    // some decode mixed a prefill (several tokens of one sequence) with other sequences' draft steps
    assert.ok(batched.counters.decodes.some(([tokens, sequences]) => sequences > 1 && tokens > sequences + 4));
});

test("greedy sampling inside llama.cpp's graph (backendSampling) drafts the same as argmax over the logits", async (t) => {
    const prompts = randomPrompts(32, 4000, 13);
    const argmax = await openEngine(t, { streams: 32, backendSampling: false });
    const inGraph = await openEngine(t, { streams: 32, backendSampling: true });
    const expected = await Promise.all(prompts.map((prompt) => argmax.engine.draft(prompt, 16)));
    assert.deepEqual(await Promise.all(prompts.map((prompt) => inGraph.engine.draft(prompt, 16))), expected);
});

test("a draft of 16 equals 16 drafts of 1, each appending the previous token (the true greedy continuation)", async (t) => {
    const { engine } = await openEngine(t);
    const prompts = randomPrompts(3, 4000, 23);
    const drafts: number[][] = [];
    const stepwise: number[][] = [];
    for (const prompt of prompts) {
        drafts.push(await engine.draft(prompt, 16));
        const steps: number[] = [];
        for (let i = 0; i < 16; i++) steps.push(...(await engine.draft([...prompt, ...steps], 1)));
        stepwise.push(steps);
    }
    await assertDraftsAgree(tinyModel, draftPairs(prompts, drafts, stepwise), "one token a request", testGpu);
});

test("prompts longer than one llama_decode batch are split over several decodes without changing the draft", async (t) => {
    const prompts = randomPrompts(3, 4000, 71).map((prompt) => [...prompt, ...prompt, ...prompt, ...prompt]);
    const whole = await openEngine(t, { streams: 3 });
    const split = await openEngine(t, { streams: 3, batchSize: 50 });
    const expected = await Promise.all(prompts.map((prompt) => whole.engine.draft(prompt, 8)));
    const drafts = await Promise.all(prompts.map((prompt) => split.engine.draft(prompt, 8)));
    await assertDraftsAgree(tinyModel, draftPairs(prompts, expected, drafts), "prompts split", testGpu);
    const prefill = split.counters.decodes.filter(([tokens]) => tokens > 3);
    assert.ok(prefill.length > 1 && prefill.every(([tokens]) => tokens <= 50), JSON.stringify(prefill));
});

test("endId stops the draft right after that token", async (t) => {
    const { engine } = await openEngine(t);
    const [prompt] = randomPrompts(1, 4000, 31);
    assert.ok(prompt);
    const full = await engine.draft(prompt, 16);
    const stop = full.findIndex((token, i) => i >= 2 && !full.slice(0, i).includes(token));
    assert.ok(stop >= 2);
    assert.deepEqual(await engine.draft(prompt, 16, { endId: full[stop] }), full.slice(0, stop + 1));
    // an endId that never comes changes nothing
    const absent = [...Array(4003).keys()].find((id) => !full.includes(id));
    assert.deepEqual(await engine.draft(prompt, 16, { endId: absent }), full);
});

test("bad input: context overflow, invalid token ids, empty prompt, each with its fields", async (t) => {
    const { engine } = await openEngine(t);
    await assert.rejects(engine.draft(new Array(contextSize - 15).fill(1), 16), (error: unknown) => {
        isEngineError("context_overflow")(error);
        const { params, message } = error as EngineError;
        assert.deepEqual(params, { tokens: contextSize - 15, n: 16, total: contextSize + 1, contextSize });
        assert.equal(
            message,
            `${contextSize - 15} tokens + 16 to draft = ${contextSize + 1} exceed the context size: expected at most ${contextSize}.`,
        );
        return true;
    });
    assert.equal((await engine.draft(new Array(contextSize - 16).fill(1), 16)).length, 16);
    for (const bad of [-1, 4003, 1.5, Number.NaN]) {
        await assert.rejects(engine.draft([1, 2, bad], 4), (error: unknown) => {
            isEngineError("invalid_token")(error);
            assert.match((error as Error).message, /index 2/);
            return true;
        });
    }
    await assert.rejects(engine.draft([], 4), isEngineError("empty_tokens"));
    await assert.rejects(engine.draft([1, 2], 4, { endId: 5000 }), (error: unknown) => {
        isEngineError("invalid_token")(error);
        assert.equal((error as Error).message, "Invalid token id 5000 at end_id: expected 0 ≤ id < 4003.");
        return true;
    });
    assert.deepEqual(await engine.draft([1, 2], 0), []);
});

test("abort: before queueing, and mid-draft (the request leaves the batch; its neighbour is unaffected)", async (t) => {
    const { engine, counters } = await openEngine(t, { streams: 3 });
    await assert.rejects(engine.draft([1, 2, 3], 4, { signal: AbortSignal.abort() }), isEngineError("aborted"));

    const [long, other, tick] = randomPrompts(3, 4000, 41);
    assert.ok(long && other && tick);
    const expectedOther = await engine.draft(other, 300);
    const controller = new AbortController();
    counters.decodes.length = 0;
    const aborted = engine.draft(long, 300, { signal: controller.signal });
    const neighbour = engine.draft(other, 300);
    // abort mid-draft: once a 2-token "tick" drafted beside them has resolved, the run holding all three has decoded
    // steps (no fixed sleep: how many steps a few ms hold depends on the CPU path and the machine's load)
    await engine.draft(tick, 2);
    controller.abort();
    await assert.rejects(aborted, isEngineError("aborted"));
    const pair = { context: other, expected: expectedOther, actual: await neighbour };
    await assertDraftsAgree(tinyModel, [pair], "the neighbour", testGpu);
    // after the abort the steps carry only the neighbour
    const twoSequenceSteps = counters.decodes.filter(([tokens, sequences]) => tokens === 2 && sequences === 2).length;
    assert.ok(
        counters.decodes.some(([, sequences]) => sequences >= 2),
        `both requests were in one round ${JSON.stringify(counters.decodes.slice(0, 4))}`,
    );
    assert.ok(
        counters.decodes.some(([tokens, sequences]) => tokens === 1 && sequences === 1),
        "the aborted sequence left the batch",
    );
    assert.ok(twoSequenceSteps < 299, `${twoSequenceSteps} steps still carried both sequences`);
    // the engine keeps working, and its slot is usable again
    assert.equal((await engine.draft(long, 4)).length, 4);
});

test("a request aborted before its run of steps starts leaves the engine able to draft and to close", async (t) => {
    const { engine } = await openEngine(t, { streams: 2 });
    const controller = new AbortController();
    const aborted = engine.draft([1, 2, 3], 4, { signal: controller.signal });
    // in the same turn: the run scheduled for it then finds nothing to do
    controller.abort();
    await assert.rejects(aborted, isEngineError("aborted"));
    // let that empty run start and end before the next request
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal((await engine.draft([1, 2, 3], 4)).length, 4);
    await engine.close();
});

test("queue_full when more requests wait than maxQueue", async (t) => {
    const { engine } = await openEngine(t, { maxQueue: 2 });
    const accepted = [engine.draft([1, 2, 3], 4), engine.draft([4, 5, 6], 4)];
    await assert.rejects(engine.draft([7, 8, 9], 4), isEngineError("queue_full"));
    for (const draft of await Promise.all(accepted)) assert.equal(draft.length, 4);
});

test("close finishes in-flight drafts, then refuses new ones", async (t) => {
    const { engine } = await openEngine(t, { streams: 4 });
    const inFlight = randomPrompts(6, 4000, 51).map((prompt) => engine.draft(prompt, 8));
    const closed = engine.close();
    await assert.rejects(engine.draft([1, 2, 3], 4), isEngineError("engine_closed"));
    for (const draft of await Promise.all(inFlight)) assert.equal(draft.length, 8);
    await closed;
    await assert.rejects(engine.draft([1, 2, 3], 4), isEngineError("engine_closed"));
});

test("a request arriving mid-draft joins the running batch at the next steps, not after the draft in flight", async (t) => {
    const steps: [sequences: number, decodeMs: number, sampleMs: number, hostMs: number, graphReused: boolean][] = [];
    const { engine, counters } = await openEngine(t, {
        streams: 4,
        observer: {
            onQueueDepth: (depth) => counters.depths.push(depth),
            onStep: ({ tokens, sequences, decodeMs, sampleMs, hostMs, graphReused }) => {
                counters.decodes.push([tokens, sequences]);
                steps.push([sequences, decodeMs, sampleMs, hostMs, graphReused]);
            },
        },
    });
    const [long, short, tick] = randomPrompts(3, 4000, 43);
    assert.ok(long && short && tick);
    const expectedShort = await engine.draft(short, 8);
    const expectedLong = await engine.draft(long, 300);
    const expectedTick = await engine.draft(tick, 2);
    counters.decodes.length = 0;
    counters.depths.length = 0;
    steps.length = 0;

    const order: string[] = [];
    const longDraft = engine.draft(long, 300).then((draft) => {
        order.push("long");
        return draft;
    });
    // A 2-token "tick" drafted beside the long one resolves mid-run once the run has decoded its steps: only then is
    // the long draft certainly in flight (a fixed sleep was not enough on a slow CPU path or a loaded machine).
    assert.deepEqual(await engine.draft(tick, 2), expectedTick);
    const shortDraft = engine.draft(short, 8).then((draft) => {
        order.push("short");
        return draft;
    });
    const joined = [
        { context: short, expected: expectedShort, actual: await shortDraft },
        { context: long, expected: expectedLong, actual: await longDraft },
    ];
    await assertDraftsAgree(tinyModel, joined, "joined mid-draft", testGpu);
    assert.deepEqual(order, ["short", "long"], "the short request waited for the long draft");

    // the decodes: the long one with the tick for its 2 steps, alone, with the short one for exactly its 8 steps,
    // then alone to the end — one decode per step of the long draft
    const sequences = counters.decodes.map(([, s]) => s);
    const joint = sequences.flatMap((s, i) => (s === 2 ? [i] : []));
    assert.equal(
        joint.length,
        10,
        `the tick's 2 and the short draft's 8 joint steps: ${JSON.stringify(sequences.slice(0, 40))}`,
    );
    const [, tickEnd, firstJoint] = joint as [number, number, number];
    assert.ok(firstJoint > tickEnd, "the short request joined after the tick had finished");
    assert.deepEqual(
        joint.slice(2),
        Array.from({ length: 8 }, (_, i) => firstJoint + i),
    );
    assert.ok(firstJoint + 8 < 300, "the short draft ran inside the long one");
    assert.equal(counters.decodes.length, 300, "one decode per step of the long draft");
    // every decode step's timing was reported, once
    assert.equal(steps.length, counters.decodes.length);
    for (const [s, decodeMs, sampleMs, hostMs] of steps) {
        assert.ok(s === 1 || s === 2);
        assert.ok(decodeMs > 0 && sampleMs >= 0 && hostMs >= 0, JSON.stringify([decodeMs, sampleMs, hostMs]));
    }
    // llama.cpp rebuilds its graph when the batch's sequences change (the short request joining and leaving) and
    // reuses it for the long runs of identical steps in between
    const reused = steps.map(([, , , , graphReused]) => graphReused);
    assert.equal(reused[firstJoint], false, "the graph was reused although a sequence joined");
    assert.ok(
        reused.filter(Boolean).length > 250,
        `graph reused in only ${reused.filter(Boolean).length} of 300 steps`,
    );
});

test("one JS round trip per step (maxStepsPerRun: 1) drafts the same as runs of many steps", async (t) => {
    const prompts = randomPrompts(8, 4000, 47);
    const many = await openEngine(t, { streams: 8 });
    const single = await openEngine(t, { streams: 8, testing: { maxStepsPerRun: 1 } });
    const expected = await Promise.all(prompts.map((prompt) => many.engine.draft(prompt, 12)));
    assert.deepEqual(await Promise.all(prompts.map((prompt) => single.engine.draft(prompt, 12))), expected);
});

test("padding steps to all streams (padBatch) drafts the same, keeps each slot's cached prefix usable, and pads only decode steps", async (t) => {
    const prompts = randomPrompts(6, 4000, 53);
    const n = 12;
    const plain = await openEngine(t, { streams: 8 });
    const padded = await openEngine(t, { streams: 8, padBatch: 0.5 });
    const random = seededRandom(9);
    let requests = prompts;
    for (let round = 0; round < 3; round++) {
        const drafted = await Promise.all(
            requests.map(async (request) => ({ request, draft: await plain.engine.draft(request, n) })),
        );
        const expected = drafted.map(({ draft }) => draft);
        // the later rounds reuse the prefix each slot cached, with throwaway tokens written past it meanwhile
        assert.deepEqual(
            await Promise.all(requests.map((request) => padded.engine.draft(request, n))),
            expected,
            `round ${round}`,
        );
        requests = drafted.map(({ request, draft }) => nextRequest(request, draft, random, 4000));
    }
    assert.ok(padded.counters.reused > 0);
    // decode steps of 4–7 drafting sequences carry 8 tokens; prefill steps are never padded
    const steps = padded.counters.decodes.filter(([, sequences]) => sequences >= 4 && sequences < 8);
    assert.ok(steps.length >= 2 * (n - 1), JSON.stringify(padded.counters.decodes.slice(0, 30)));
    for (const [tokens, sequences] of steps) {
        // a step with a prefill (more tokens than sequences, short of padding) is left as it is
        assert.ok(tokens === 8 || tokens > sequences, `a step of ${sequences} sequences carried ${tokens} tokens`);
    }
    assert.ok(steps.filter(([tokens]) => tokens === 8).length >= 2 * (n - 1));
    // without padding, the same drafting steps carry one token per sequence
    assert.ok(plain.counters.decodes.some(([tokens, sequences]) => sequences === 6 && tokens === 6));
});
