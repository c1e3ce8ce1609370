/**
 * src/client stands alone: its files import only each other and Node's modules, so a client (validate, generate,
 * serveBench, a grader's script) never pulls in the engine or the server (docs/architecture.md, the module map).
 */

import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { test } from "node:test";

test("src/client imports nothing from the other folders of src/ nor any package", async () => {
    const folder = new URL("../../src/client/", import.meta.url);
    const files = (await readdir(folder)).filter((name) => name.endsWith(".ts"));
    assert.ok(files.length > 0, "src/client has files");
    for (const name of files) {
        const source = await readFile(new URL(name, folder), "utf8");
        for (const [, specifier] of source.matchAll(/^\s*(?:import|export)\b[^;]*?from\s+"([^"]+)"/gms)) {
            assert.ok(
                specifier?.startsWith("./") || specifier?.startsWith("node:"),
                `src/client/${name} imports ${specifier}: expected only ./… or node:…`,
            );
        }
    }
});
