/**
 * The GGUF reader (src/engine/gguf.ts): vocabulary fingerprint (same as Python's), the one quantization rule, clear
 * one-line errors for unusable files.
 */

import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { EngineLoadError } from "../../src/engine/errors.js";
import {
    type GgufTensor,
    ggufFileType,
    ggufQuantization,
    readGgufHeader,
    readModelFileInfo,
    vocabFingerprint,
} from "../../src/engine/gguf.js";
import { loadEngine } from "../../src/engine/loadEngine.js";
import { tinyModel, tinyModelQ4, tinyModelVocab2 } from "./helpers/engineFixtures.js";

/** The default drafter: Q4_0 blocks and a Q8_0 token embedding holding more elements than all blocks together. */
const defaultDrafter = fileURLToPath(new URL("../../models/specdraft-default.gguf", import.meta.url));

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
    const [a, b, q4] = await Promise.all([
        readModelFileInfo(tinyModel),
        readModelFileInfo(tinyModelVocab2),
        readModelFileInfo(tinyModelQ4),
    ]);
    assert.notEqual(a.vocabFingerprint, b.vocabFingerprint);
    assert.equal(b.vocabSize, 3003);
    assert.equal(a.vocabFingerprint, q4.vocabFingerprint);
    assert.deepEqual([a.quantization, b.quantization, q4.quantization], ["Q8_0", "F32", "Q4_0"]);
    assert.equal(a.architecture, "qwen3");
    assert.match(a.modelName, /tiny-qwen3/);
});

test("a file's quantization is its matmul weights' type, not its largest tensor's, and agrees with file_type", async () => {
    const header = await readGgufHeader(defaultDrafter);
    const embedding = header.tensors.find((t) => t.name === "token_embd.weight");
    const blocks = header.tensors.filter((t) => t.name.startsWith("blk.") && t.dimensions.length === 2);
    assert.equal(embedding?.type, "Q8_0");
    assert.ok(embedding.elements > blocks.reduce((sum, t) => sum + t.elements, 0), "the embedding outweighs the rest");
    assert.equal(ggufQuantization(header), "Q4_0");
    assert.equal((await readModelFileInfo(defaultDrafter)).quantization, "Q4_0");
    // every file specdraft writes says the same in general.file_type
    for (const path of [defaultDrafter, tinyModel, tinyModelQ4, tinyModelVocab2]) {
        const h = await readGgufHeader(path);
        assert.equal(ggufFileType(h)?.replace(/^(MOSTLY|ALL)_/, ""), ggufQuantization(h), path);
    }
});

test("the rule: most block matmul weights (ties by elements), norms and vocabulary tensors aside; else file_type", () => {
    const tensor = (name: string, type: string, ...dimensions: number[]): GgufTensor => ({
        name,
        type,
        dimensions,
        elements: dimensions.reduce((p, d) => p * d, 1),
    });
    const metadata = { general: { file_type: 7 } } as unknown as Parameters<typeof ggufQuantization>[0]["metadata"];
    const mixed = [
        tensor("token_embd.weight", "Q8_0", 2048, 151936),
        tensor("output.weight", "Q6_K", 2048, 151936),
        tensor("blk.0.attn_q.weight", "Q4_0", 2048, 2048),
        tensor("blk.0.attn_v.weight", "Q6_K", 2048, 1024),
        tensor("blk.0.ffn_up.weight", "Q4_0", 2048, 6144),
        tensor("blk.0.attn_norm.weight", "F32", 2048),
        tensor("blk.0.ffn_norm.weight", "F32", 2048),
        tensor("blk.0.attn_k_norm.weight", "F32", 128),
    ];
    assert.equal(ggufQuantization({ tensors: mixed, metadata }), "Q4_0");
    const tie = [tensor("blk.0.a.weight", "Q4_0", 64, 64), tensor("blk.0.b.weight", "Q8_0", 64, 128)];
    assert.equal(ggufQuantization({ tensors: tie, metadata }), "Q8_0");
    assert.equal(ggufQuantization({ tensors: [tensor("token_embd.weight", "F16", 64, 100)], metadata }), "Q8_0");
    assert.equal(ggufQuantization({ tensors: [], metadata: {} as typeof metadata }), "unknown");
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
