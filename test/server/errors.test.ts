/** The error catalog: every code documented in docs/api.md with the same status and message, and templates that fill. */

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { apiError, errorCatalog, formatErrorMessage } from "../../src/server/errors.js";

test("docs/api.md documents exactly the catalog's codes, statuses and message templates", async () => {
    const doc = await readFile(new URL("../../docs/api.md", import.meta.url), "utf8");
    const documented = new Map<string, { status: number; template: string }>();
    for (const [, code = "", status, template = ""] of doc.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \| `(.+)` \|$/gm)) {
        assert.ok(!documented.has(code), `${code} is documented twice`);
        documented.set(code, { status: Number(status), template: template });
    }
    assert.deepEqual([...documented.keys()].sort(), Object.keys(errorCatalog).sort());
    for (const [code, spec] of Object.entries(errorCatalog)) {
        assert.deepEqual(documented.get(code), { status: spec.status, template: spec.template }, code);
    }
});

test("every status is an HTTP error status and every message ends with a period", () => {
    for (const [code, spec] of Object.entries(errorCatalog)) {
        assert.ok(spec.status >= 400 && spec.status < 600, code);
        assert.match(spec.template, /\.$/, code);
    }
});

test("messages fill every slot", () => {
    assert.equal(
        formatErrorMessage("invalid_token", { id: 151936, position: "index 3", vocabSize: 151936 }),
        "Invalid token id 151936 at index 3: expected 0 ≤ id < 151936.",
    );
    const error = apiError("queue_full", { retryAfter: 2 }, { "retry-after": "2" });
    assert.equal(error.statusCode, 503);
    assert.equal(error.message, "The draft queue is full: retry after 2 s.");
    assert.deepEqual(error.headers, { "retry-after": "2" });
    assert.equal(apiError("shutting_down").message, "The server is shutting down.");
});
