/**
 * Writes docs/openapi.json from the server's route schemas (src/server/buildOpenApiDocument.ts).
 * Run: node --import tsx scripts/generateOpenapi.ts          (write)
 *      node --import tsx scripts/generateOpenapi.ts --check  (exit 1 if the committed file is out of date)
 */

import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { buildOpenApiDocument } from "../src/server/buildOpenApiDocument.js";

const target = fileURLToPath(new URL("../docs/openapi.json", import.meta.url));
const text = `${JSON.stringify(await buildOpenApiDocument(), null, 2)}\n`;

if (process.argv.includes("--check")) {
    const committed = await readFile(target, "utf8").catch(() => "");
    if (committed !== text) {
        process.stderr.write("docs/openapi.json is out of date: run `node --import tsx scripts/generateOpenapi.ts`.\n");
        process.exit(1);
    }
    process.stdout.write("docs/openapi.json is up to date.\n");
} else {
    await writeFile(target, text);
    process.stdout.write(`wrote ${target}\n`);
}
