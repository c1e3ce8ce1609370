/**
 * The drafter's timed walks (src/speedup/measureCosts.ts) without a model: a walk along a held-out conversation grows
 * its context by the agreeing part of each draft and the continuation's next token, and ends at the continuation's
 * end; the timed drafts are shared out over the sources after one untimed draft each; conversations are picked one
 * category at a time and start spread along their continuations.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
    conversationGrowth,
    conversationSource,
    type DraftFn,
    pickConversations,
    timeWalk,
} from "../../src/speedup/measureCosts.js";

test("a conversation's growth: the agreeing prefix of each draft, then the continuation's own token", () => {
    const growth = conversationGrowth([10, 11, 12, 13, 14, 15]);
    assert.equal(growth.accepted([10, 11, 99]), 2);
    assert.equal(growth.nextToken(), 12);
    assert.equal(growth.accepted([99]), 0);
    assert.equal(growth.nextToken(), 13);
    // a draft that runs past the end accepts at most up to the last token, which stays the target's own
    assert.equal(growth.accepted([14, 15, 16]), 1);
    assert.equal(growth.exhausted?.(), false);
    assert.equal(growth.nextToken(), 15);
    assert.equal(growth.exhausted?.(), true);
});

test("timeWalk: contexts grow along the conversation; the timed drafts are shared out, one untimed draft each", async () => {
    const continuation = Array.from({ length: 40 }, (_, i) => 100 + i);
    const seen: number[][] = [];
    // a drafter that knows the continuation: it drafts the next n tokens but gets the third one wrong
    const draft: DraftFn = async (tokens, n) => {
        seen.push(tokens.slice());
        const at = tokens.length - 2; // the prompt below is 2 tokens
        return Array.from({ length: n }, (_, j) => (j === 2 ? -1 : (continuation[at + j] ?? -1)));
    };
    const sources = [
        { prompt: [1, 2], growth: () => conversationGrowth(continuation) },
        { prompt: [1, 2], growth: () => conversationGrowth(continuation) },
    ];
    const between: number[] = [];
    const out = await timeWalk(draft, sources, [4], 5, { between: async (n) => void between.push(n) });
    assert.ok(Number.isFinite(out.n4) && (out.n4 ?? -1) >= 0);
    // 5 timed drafts: 3 on the first source, 2 on the second, each after an untimed first draft
    assert.equal(seen.length, 2 + 5);
    assert.equal(between.length, 5);
    // each step accepts 2 drafts and adds the continuation's next token: 3 tokens a step, exactly the continuation
    assert.deepEqual(seen[1], [1, 2, 100, 101, 102]);
    assert.deepEqual(seen[3], [1, 2, ...continuation.slice(0, 9)]);
    assert.deepEqual(seen[4], [1, 2], "the second source starts again from its prompt");
});

test("timeWalk: a conversation that ends stops its share; none timed at all is an error", async () => {
    const draft: DraftFn = async (_tokens, n) => Array.from({ length: n }, () => 7);
    const short = { prompt: [1], growth: () => conversationGrowth([7, 7, 7]) };
    const calls: number[] = [];
    const out = await timeWalk(draft, [short], [2], 10, { onRequest: (n) => void calls.push(n) });
    assert.equal(calls.length, 1, "2 accepted + the last token: the continuation ends after one step");
    assert.ok(Number.isFinite(out.n2));
    const empty = { prompt: [1], growth: () => conversationGrowth([]) };
    await assert.rejects(timeWalk(draft, [empty], [2], 3), /no draft of 2 timed/);
});

test("conversations: one category at a time, starts spread over the first half of each continuation", () => {
    const make = (category: string, i: number) => ({
        category,
        promptTokens: [i],
        continuationTokens: Array.from({ length: 100 }, (_, j) => j),
    });
    const all = [make("a", 0), make("a", 1), make("a", 2), make("b", 3), make("c", 4)];
    const picked = pickConversations(all, 4);
    assert.deepEqual(
        picked.map((c) => c.promptTokens[0]),
        [0, 3, 4, 1],
    );
    assert.equal(pickConversations(all, 10).length, 5);
    const starts = picked.map((c, i) => conversationSource(c, i).prompt.length - 1);
    assert.equal(starts[0], 0);
    for (const start of starts) assert.ok(start >= 0 && start < 50, String(start));
    assert.equal(new Set(starts).size, starts.length, `distinct starts: ${starts}`);
});
