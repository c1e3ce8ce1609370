/**
 * `specdraft pack`: the folder's files, architecture.json read back from the GGUF (and agreeing with what a server of
 * the same file says in GET /info), manifest checks, bad input.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { access, constants, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { readGgufFileInfo } from "node-llama-cpp";
import { runPack } from "../../src/cli/packCommand.js";
import { loadEngine } from "../../src/engine/loadEngine.js";
import type { DataManifest } from "../../src/pack/dataManifest.js";
import type { ArchitectureFile } from "../../src/pack/drafterFolder.js";
import { buildApp } from "../../src/server/buildApp.js";
import { captureIo } from "../helpers/captureIo.js";

const model = "test/fixtures/tiny-qwen3-q4_0.gguf";
const manifest = {
    sources: [
        { name: "python-stdlib", split: "pretrain", uri: "python3.11 /usr/lib/python3.11", sha256: "a".repeat(64) },
        { name: "lab-target-continuations", split: "distill", revision: "runs/lab/reference@3f2c1d0" },
    ],
};

async function withTempDir(run: (dir: string) => Promise<void>): Promise<void> {
    const dir = await mkdtemp(path.join(tmpdir(), "specdraft-pack-"));
    try {
        await run(dir);
    } finally {
        await rm(dir, { recursive: true, force: true });
    }
}

test("pack writes the model, an executable serve.sh, architecture.json from the GGUF and the manifest", () =>
    withTempDir(async (dir) => {
        const manifestFile = path.join(dir, "data_manifest.json");
        await writeFile(manifestFile, JSON.stringify(manifest));
        const out = path.join(dir, "drafter");
        const io = captureIo();
        assert.equal(
            await runPack({ model, out, manifest: manifestFile, base: "Qwen/Qwen3-8B@b968826", draftLength: 12 }, io),
            0,
            io.text().err,
        );
        assert.deepEqual((await readdir(out)).sort(), [
            "architecture.json",
            "data_manifest.json",
            "serve.sh",
            "tiny-qwen3-q4_0.gguf",
        ]);
        await access(path.join(out, "serve.sh"), constants.X_OK);
        assert.deepEqual(await readFile(path.join(out, "tiny-qwen3-q4_0.gguf")), await readFile(model));

        const architecture = JSON.parse(
            await readFile(path.join(out, "architecture.json"), "utf8"),
        ) as ArchitectureFile;
        const gguf = await readGgufFileInfo(model, { logWarnings: false });
        const tokens = gguf.metadata.tokenizer.ggml.tokens;
        assert.equal(architecture.architecture, gguf.metadata.general.architecture);
        assert.equal(architecture.vocab_size, tokens.length);
        assert.equal(
            architecture.vocab_fingerprint,
            createHash("sha256")
                .update(Buffer.from(JSON.stringify(tokens), "utf8"))
                .digest("hex"),
        );
        assert.equal(architecture.quantization, "Q4_0");
        assert.deepEqual(architecture.base_model, { name: "Qwen/Qwen3-8B", revision: "b968826" });
        assert.equal(architecture.draft_length, 12);
        assert.equal(architecture.size_bytes, (await stat(model)).size);
        assert.equal(
            architecture.model_sha256,
            createHash("sha256")
                .update(await readFile(model))
                .digest("hex"),
        );
        assert.equal(architecture.block_count, gguf.architectureMetadata.block_count);
        assert.ok(architecture.parameters > 0);

        const written = JSON.parse(await readFile(path.join(out, "data_manifest.json"), "utf8")) as DataManifest;
        assert.equal(written.complete, true);
        assert.deepEqual(written.sources, manifest.sources);
        const script = await readFile(path.join(out, "serve.sh"), "utf8");
        assert.match(script, /--draft-len 12/);
        assert.match(script, /PORT:-8000/);
    }));

test("without --manifest the folder says its sources are unknown; the F32 fixture reads as F32", () =>
    withTempDir(async (dir) => {
        const out = path.join(dir, "drafter");
        const io = captureIo();
        assert.equal(await runPack({ model: "test/fixtures/tiny-qwen3-vocab2.gguf", out }, io), 0);
        assert.match(io.text().err, /no --manifest/);
        assert.match(io.text().err, /no --base/);
        const written = JSON.parse(await readFile(path.join(out, "data_manifest.json"), "utf8")) as DataManifest;
        assert.equal(written.complete, false);
        assert.deepEqual(written.sources, []);
        assert.match(written.note ?? "", /not recorded/);
        const architecture = JSON.parse(
            await readFile(path.join(out, "architecture.json"), "utf8"),
        ) as ArchitectureFile;
        assert.equal(architecture.quantization, "F32");
        assert.equal(architecture.base_model, null);
        assert.equal(architecture.draft_length, 16);
    }));

test("architecture.json and GET /info describe the default drafter alike: Q4_0, though its Q8_0 embedding is larger", () =>
    withTempDir(async (dir) => {
        const defaultDrafter = "models/specdraft-default.gguf";
        const out = path.join(dir, "drafter");
        const io = captureIo();
        assert.equal(await runPack({ model: defaultDrafter, out }, io), 0, io.text().err);
        const architecture = JSON.parse(
            await readFile(path.join(out, "architecture.json"), "utf8"),
        ) as ArchitectureFile;
        const { app, slot } = buildApp({ draftLength: 16 });
        const engine = await loadEngine({
            modelPath: defaultDrafter,
            streams: 1,
            contextSize: 64,
            gpu: "cpu",
            threads: 1,
        });
        slot.fill(engine);
        try {
            const info = (await app.inject({ method: "GET", url: "/info" })).json();
            assert.equal(architecture.quantization, "Q4_0");
            assert.equal(info.quantization, architecture.quantization);
            assert.equal(info.vocab_fingerprint, architecture.vocab_fingerprint);
            assert.equal(info.vocab_size, architecture.vocab_size);
            assert.equal(info.file_bytes, architecture.size_bytes);
            assert.equal(architecture.file_type, "MOSTLY_Q4_0");
        } finally {
            await app.close();
            await engine.close();
        }
    }));

test("bad input is refused with the problem named and nothing written", () =>
    withTempDir(async (dir) => {
        const attempt = async (options: Parameters<typeof runPack>[0]): Promise<string> => {
            const io = captureIo();
            assert.equal(await runPack(options, io), 2);
            return io.text().err;
        };
        const out = path.join(dir, "out");
        assert.match(await attempt({ model, out, base: "Qwen3-8B" }), /--base "Qwen3-8B": expected NAME@REV/);
        const unpinned = path.join(dir, "unpinned.json");
        await writeFile(
            unpinned,
            JSON.stringify({ sources: [{ name: "web", split: "pretrain", uri: "https://example.org" }] }),
        );
        assert.match(
            await attempt({ model, out, manifest: unpinned }),
            /"sources"\[0\] \(web\): expected a pinned "revision" or a content "sha256"/,
        );
        const noSplit = path.join(dir, "nosplit.json");
        await writeFile(noSplit, JSON.stringify({ sources: [{ name: "web", revision: "1" }] }));
        assert.match(await attempt({ model, out, manifest: noSplit }), /\.split: expected the split it fed/);
        assert.match(await attempt({ model: path.join(dir, "missing.gguf"), out }), /--model .*missing\.gguf/);
        await assert.rejects(access(out));
        await mkdir(out);
        await writeFile(path.join(out, "keep.txt"), "x");
        assert.match(await attempt({ model, out }), /folder is not empty/);
    }));
