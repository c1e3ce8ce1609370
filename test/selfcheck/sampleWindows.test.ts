/** The serving-time sample: windows spread from the opening to the end of the first N conversations. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { sampleWindows } from "../../src/selfcheck/sampleWindows.js";
import { conversation } from "../helpers/continuationOracle.js";

test("windows start at 0 and end at L, evenly spread, and carry the continuation before them as prompt", () => {
    const c = conversation("a", 1, 14);
    const windows = sampleWindows([c, conversation("b", 2, 3), conversation("c", 3, 50)], {
        conversations: 2,
        windowTokens: 4,
        windowsPerConversation: 3,
    });
    // a: L = 14, W = 4, 3 windows (3 fit): starts 0, (14 − 4)/2 = 5, 10;  b: L = 3 < W → one window of all 3;  c: not among the first 2
    assert.deepEqual(
        windows.map((w) => w.id),
        ["a@0", "a@5", "a@10", "b@0"],
    );
    const [, second, third, fourth] = windows;
    assert.ok(second && third && fourth);
    assert.deepEqual(second.promptTokens, [...c.promptTokens, ...c.continuationTokens.slice(0, 5)]);
    assert.deepEqual(second.continuationTokens, c.continuationTokens.slice(5, 9));
    assert.deepEqual(third.continuationTokens, c.continuationTokens.slice(10, 14));
    assert.equal(fourth.continuationTokens.length, 3);
});

test("no more windows than fit without overlap", () => {
    // L = 9, W = 4: floor(9 / 4) = 2 windows although 5 are allowed: starts 0 and 5
    const windows = sampleWindows([conversation("a", 1, 9)], {
        conversations: 1,
        windowTokens: 4,
        windowsPerConversation: 5,
    });
    assert.deepEqual(
        windows.map((w) => w.id),
        ["a@0", "a@5"],
    );
});
