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
import { packCommand, runPack } from "../../src/cli/packCommand.js";
import { loadEngine } from "../../src/engine/loadEngine.js";
import type { DataManifest } from "../../src/pack/dataManifest.js";
import type { ArchitectureFile } from "../../src/pack/drafterFolder.js";
import { buildApp } from "../../src/server/buildApp.js";
import { captureIo } from "../helpers/captureIo.js";
import { serveAppDefaults } from "../server/testApp.js";

const model = "test/fixtures/tiny-qwen3-q4_0.gguf";
const manifest = {
    sources: [
        { name: "python-stdlib", split: "pretrain", uri: "python3.11 /usr/lib/python3.11", sha256: "a".repeat(64) },
        { name: "lab-target-continuations", split: "distill", revision: "runs/lab/reference@3f2c1d0" },
    ],
};

/** Every byte of `dir`, as pack and selfcheck count it. */
async function folderSize(dir: string): Promise<number> {
    let total = 0;
    for (const file of await readdir(dir, { recursive: true })) {
        const info = await stat(path.join(dir, file));
        if (info.isFile()) total += info.size;
    }
    return total;
}

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
            await runPack(
                { model, out, manifest: manifestFile, base: "Qwen/Qwen3-8B@b968826", draftLength: 12, lookahead: 5 },
                io,
            ),
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
        assert.equal(architecture.lookahead, 5);
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
        assert.match(script, /--draft-len 12 --lookahead 5 "\$@"/);
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
        // no --lookahead: none recorded, and serve.sh leaves serve's default for its backend
        assert.equal(architecture.lookahead, null);
        assert.doesNotMatch(await readFile(path.join(out, "serve.sh"), "utf8"), /--lookahead/);
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
        const { app, slot } = buildApp({ ...serveAppDefaults, draftLength: 16 });
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

test("a folder over --max-bytes is refused before anything is written, its largest parts named; at the cap it packs", () =>
    withTempDir(async (dir) => {
        const first = path.join(dir, "first");
        const io = captureIo();
        assert.equal(await runPack({ model, out: first }, io), 0, io.text().err);
        assert.match(
            io.text().out,
            /folder: [\d,]+ B of --max-bytes 1,000,000,000 B \(model 0\.0 % of the cap; serve\.sh needs node and specdraft on the host/,
        );
        const total = await folderSize(first);

        const exact = path.join(dir, "exact");
        assert.equal(await runPack({ model, out: exact, maxBytes: total }, captureIo()), 0);
        assert.equal(await folderSize(exact), total);

        const over = path.join(dir, "over");
        const refused = captureIo();
        assert.equal(await runPack({ model, out: over, maxBytes: total - 1 }, refused), 2);
        assert.match(
            refused.text().err,
            new RegExp(
                `--out ${over} would hold ${total.toLocaleString("en-US")} B, over --max-bytes ${(total - 1).toLocaleString("en-US")} B by 1 B; ` +
                    `largest parts: tiny-qwen3-q4_0\\.gguf 452,416 B, serve\\.sh [\\d,]+ B, architecture\\.json [\\d,]+ B, and 1 more \\(204 B\\)`,
            ),
        );
        await assert.rejects(access(over));
        assert.deepEqual((await readdir(dir)).sort(), ["exact", "first"], "no staging folder left beside it");

        // --force: what the folder already holds counts too
        await writeFile(path.join(exact, "notes.bin"), Buffer.alloc(10));
        const forced = captureIo();
        assert.equal(await runPack({ model, out: exact, maxBytes: total + 9, force: true }, forced), 2);
        assert.match(forced.text().err, /by 1 B; .*, and 2 more/);
    }));

test("over the cap with a Q8_0 token embedding in a Q4_0 file, the refusal says an all-Q4_0 export is smaller", () =>
    withTempDir(async (dir) => {
        const io = captureIo();
        assert.equal(
            await runPack(
                { model: "models/specdraft-default.gguf", out: path.join(dir, "d"), maxBytes: 1_000_000 },
                io,
            ),
            2,
        );
        const modelBytes = (await stat("models/specdraft-default.gguf")).size.toLocaleString("en-US");
        assert.ok(io.text().err.includes(`largest parts: specdraft-default.gguf ${modelBytes} B`), io.text().err);
        assert.match(
            io.text().err,
            /Its token embedding is Q8_0: an all-Q4_0 export \(python -m specdraft_train export --embedding-type Q4_0\) is smaller/,
        );
    }));

test("--max-bytes takes byte counts with units and refuses anything else, naming what it expected", async () => {
    const parse = async (value: string): Promise<string> => {
        const command = packCommand()
            .exitOverride()
            .configureOutput({ writeErr: () => undefined });
        command.action(() => undefined);
        try {
            await command.parseAsync(["--model", model, "--out", "x", "--max-bytes", value], { from: "user" });
            return `ok ${command.opts().maxBytes}`;
        } catch (error) {
            return (error as Error).message;
        }
    };
    assert.equal(await parse("1000000000"), "ok 1000000000");
    assert.equal(await parse("950MB"), "ok 950000000");
    assert.equal(await parse("0.3GB"), "ok 300000000");
    assert.equal(await parse("1GiB"), `ok ${2 ** 30}`);
    assert.equal(await parse("1_000"), "ok 1000");
    for (const bad of ["0", "-5", "1.5", "1e9", "lots", "12 TB", "0.5B"])
        assert.match(
            await parse(bad),
            new RegExp(
                `option '--max-bytes <bytes>' argument '${bad.replace(".", "\\.")}' is invalid\\. expected a byte count ≥ 1 such as 1000000000, 950MB or 1GiB, found "${bad.replace(".", "\\.")}"`,
            ),
            bad,
        );
    assert.equal(packCommand().opts().maxBytes, 1_000_000_000, "the default is the folder cap");
});

test("bad input is refused with the problem named and nothing written", () =>
    withTempDir(async (dir) => {
        const attempt = async (options: Parameters<typeof runPack>[0]): Promise<string> => {
            const io = captureIo();
            assert.equal(await runPack(options, io), 2);
            return io.text().err;
        };
        const out = path.join(dir, "out");
        assert.match(
            await attempt({ model, out, base: "Qwen3-1.7B" }),
            /--base "Qwen3-1\.7B": expected NAME@REV, e\.g\. Qwen\/Qwen3-1\.7B@/,
        );
        // the base is the model the drafter was trained from (what export writes as general.base_model), not its target
        assert.match(
            packCommand().helpInformation(),
            /--base <name@rev>\s+the model the drafter was trained from[\s\S]*Qwen\/Qwen3-1\.7B@/,
        );
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
