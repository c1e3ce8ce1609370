/** docs/openapi.json is what scripts/generateOpenapi.ts makes from the current schemas, and its refs resolve. */

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { buildOpenApiDocument } from "../../src/server/buildOpenApiDocument.js";

const committedPath = new URL("../../docs/openapi.json", import.meta.url);

test("the committed docs/openapi.json is up to date (else: node --import tsx scripts/generateOpenapi.ts)", async () => {
    const committed = JSON.parse(await readFile(committedPath, "utf8"));
    assert.deepEqual(committed, await buildOpenApiDocument());
});

test("it documents every route and every $ref points at a component", async () => {
    const doc = await buildOpenApiDocument();
    const paths = doc.paths as Record<string, Record<string, unknown>>;
    assert.deepEqual(
        Object.entries(paths).flatMap(([path, item]) =>
            Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`),
        ),
        ["POST /draft", "GET /health", "GET /info", "GET /metrics"],
    );
    const components = (doc.components as { schemas: Record<string, unknown> }).schemas;
    const refs = [...JSON.stringify(doc).matchAll(/"\$ref":"([^"]+)"/g)].map((m) => m[1] ?? "");
    assert.ok(refs.length > 0);
    for (const ref of refs) {
        assert.match(ref, /^#\/components\/schemas\//);
        assert.ok(ref.slice("#/components/schemas/".length) in components, `${ref} resolves`);
    }
});
