/** Malformed held-out lines are rejected with their line numbers; the good lines around them are kept. */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { readHeldOutFile } from "../../src/validate/readHeldOutFile.js";

const lines = [
    /* 1 */ `{"id":"a","category":"code","prompt_tokens":[1,2],"continuation_tokens":[3,4]}`,
    /* 2 */ `{"id":"b","prompt_tokens":[1],"continuation_tokens":[5]`,
    /* 3 */ `{"prompt_tokens":[1],"continuation_tokens":[5]}`,
    /* 4 */ `{"id":"c","prompt_tokens":[1,"2"],"continuation_tokens":[5]}`,
    /* 5 */ `{"id":"d","prompt_tokens":[1],"continuation_tokens":[-5]}`,
    /* 6 */ ``,
    /* 7 */ `{"id":"e","prompt_tokens":[],"continuation_tokens":[5]}`,
    /* 8 */ `{"id":"a","prompt_tokens":[9],"continuation_tokens":[5]}`,
    /* 9 */ `{"id":"f","prompt_tokens":[1.5],"continuation_tokens":[5]}`,
    /* 10 */ `[1,2,3]`,
    /* 11 */ `{"id":"g","category":7,"prompt_tokens":[1],"continuation_tokens":[]}`,
    /* 12 */ `{"id":"h","prompt_tokens":[7],"continuation_tokens":[]}`,
    /* 13 */ `{"id":"i","prompt_tokens":[8],"continuation_tokens":"[5]"}`,
];

test("every malformed line is rejected with its 1-based number and what was wrong", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "specdraft-heldout-"));
    try {
        const file = path.join(dir, "held.jsonl");
        await writeFile(file, `${lines.join("\n")}\n`);
        const { conversations, rejected } = await readHeldOutFile(file);
        assert.deepEqual(
            conversations.map((c) => [c.id, c.lineNumber, c.category]),
            [
                ["a", 1, "code"],
                ["h", 12, undefined],
            ],
        );
        assert.deepEqual(conversations[0]?.promptTokens, [1, 2]);
        assert.deepEqual(conversations[0]?.continuationTokens, [3, 4]);
        assert.deepEqual(
            rejected.map((r) => r.lineNumber),
            [2, 3, 4, 5, 7, 8, 9, 10, 11, 13],
        );
        const message = (line: number): string => rejected.find((r) => r.lineNumber === line)?.message ?? "";
        assert.match(message(2), /not JSON/);
        assert.match(message(3), /"id": expected a non-empty string, found nothing/);
        assert.match(message(4), /"prompt_tokens"\[1\]: expected an integer ≥ 0, found "2"/);
        assert.match(message(5), /"continuation_tokens"\[0\]: expected an integer ≥ 0, found -5/);
        assert.match(message(7), /"prompt_tokens": expected at least one token/);
        assert.match(message(8), /duplicate id "a" \(first on line 1\)/);
        assert.match(message(9), /found 1\.5/);
        assert.match(message(10), /expected a JSON object, found \[1,2,3\]/);
        assert.match(message(11), /"category": expected a string, found 7/);
        assert.match(message(13), /"continuation_tokens": expected an array/);

        const limited = await readHeldOutFile(file, { limit: 1 });
        assert.deepEqual(
            limited.conversations.map((c) => c.id),
            ["a"],
        );
    } finally {
        await rm(dir, { recursive: true, force: true });
    }
});
