/** What the engine reports about a GGUF: vocabulary fingerprint (same as Python's), weight type, clear load errors. */

import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { EngineLoadError } from "../../src/engine/errors.js";
import { loadEngine } from "../../src/engine/loadEngine.js";
import { readModelFileInfo } from "../../src/engine/readModelFileInfo.js";
import { vocabFingerprint } from "../../src/engine/vocabFingerprint.js";
import { tinyModel, tinyModelQ4, tinyModelVocab2 } from "./helpers/engineFixtures.js";

test("the fingerprint equals Python's sha256 of json.dumps(tokens, ensure_ascii=False, separators=(',', ':'))", async () => {
    const info = await readModelFileInfo(tinyModel);
    // computed independently with the `gguf` Python package:
    //   r = gguf.GGUFReader(path); f = r.fields["tokenizer.ggml.tokens"]
    //   toks = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    //   hashlib.sha256(json.dumps(toks, ensure_ascii=False, separators=(",", ":")).encode("utf-8")).hexdigest()
    assert.equal(info.vocabFingerprint, "9028c8397cd823ee6070f948811b842b729b5e0627da1040226947c72816fc85");
    assert.equal(info.vocabSize, 4003);
});

test("the fingerprint escapes like Python's json.dumps for control characters, quotes and non-ASCII", () => {
    // json.dumps(["a\"b", "\\", "\n\t\u0001", "Ġé中", "\u007f"], ensure_ascii=False, separators=(",", ":"))
    const python = '["a\\"b","\\\\","\\n\\t\\u0001","Ġé中","\u007f"]';
    assert.equal(JSON.stringify(['a"b', "\\", "\n\t\u0001", "Ġé中", "\u007f"]), python);
    assert.notEqual(vocabFingerprint(["a", "b"]), vocabFingerprint(["b", "a"]));
});

test("a different vocabulary has a different fingerprint; the same vocabulary quantized differently has the same", async () => {
    const [a, b, q4] = await Promise.all([tinyModel, tinyModelVocab2, tinyModelQ4].map((p) => readModelFileInfo(p)));
    assert.notEqual(a.vocabFingerprint, b.vocabFingerprint);
    assert.equal(b.vocabSize, 3003);
    assert.equal(a.vocabFingerprint, q4.vocabFingerprint);
    assert.deepEqual([a.quantization, b.quantization, q4.quantization], ["Q8_0", "F32", "Q4_0"]);
    assert.equal(a.architecture, "qwen3");
    assert.match(a.modelName, /tiny-qwen3/);
});

test("a missing or corrupt model file gives a one-line EngineLoadError", async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "specdraft-engine-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const garbage = join(dir, "garbage.gguf");
    await writeFile(garbage, "this is not a model\n".repeat(10));
    const truncated = join(dir, "truncated.gguf");
    await writeFile(truncated, (await readFile(tinyModel)).subarray(0, 1000));

    for (const [path, pattern] of [
        [join(dir, "missing.gguf"), /does not exist/],
        [garbage, /not a valid GGUF file/],
        [truncated, /not a valid GGUF file|cannot load|truncated/i],
    ] as const) {
        await assert.rejects(loadEngine({ modelPath: path, streams: 1, contextSize: 64 }), (error: unknown) => {
            assert.ok(error instanceof EngineLoadError, `expected EngineLoadError for ${path}, got ${String(error)}`);
            assert.match(error.message, pattern);
            assert.ok(!error.message.includes("\n"), "message must be one line");
            assert.ok(error.message.includes(path), "message must name the file");
            return true;
        });
    }
});
