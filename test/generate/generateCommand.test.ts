/**
 * The `specdraft generate` command: --data JSONL with --out (summary file, table), --prompt, refusals with exit ≠ 0
 * (vocabulary mismatch, two draft sources, no prompt), and the real CLI process end to end.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { runGenerateCommand } from "../../src/cli/generateCommand.js";
import type { GenerateSummary } from "../../src/generate/types.js";
import { assertLossless } from "../helpers/assertLossless.js";
import { captureIo } from "../helpers/captureIo.js";
import { otherVocabModel, quantizedDrafter, targetModel, testThreads } from "./testModels.js";

let folder: string;
let dataFile: string;
before(async () => {
    folder = await mkdtemp(join(tmpdir(), "specdraft-generate-"));
    dataFile = join(folder, "held-out.jsonl");
    const lines = [
        {
            id: "a",
            category: "code",
            prompt_tokens: [750, 912, 2877, 11, 293, 982, 262, 470, 264, 488, 293, 198],
            continuation_tokens: [1, 2],
        },
        { id: "b", prompt_tokens: [40, 1079, 264, 1075, 13, 40, 1079], continuation_tokens: [] },
        { id: "broken", prompt_tokens: "not a list", continuation_tokens: [] },
    ];
    await writeFile(dataFile, `${lines.map((line) => JSON.stringify(line)).join("\n")}\n`);
});
after(async () => {
    await rm(folder, { recursive: true, force: true });
});

/**
 * The table's last row when the outputs are lossless: identical, or parted only at near ties (exit 0 either way; the
 * speculative run decodes the target in other shapes than the target alone, so equality is not the promise).
 */
const losslessRow = /outputs identical\s+(yes|NO \(\d+ of \d+ at near ties\))\n/;

test("--data --skip-invalid with --out: a side-by-side table, a lossless JSON summary, rejected lines reported", async () => {
    const out = join(folder, "summary.json");
    const io = captureIo();
    const { exitCode } = await runGenerateCommand(
        {
            target: targetModel,
            draftModel: quantizedDrafter,
            data: dataFile,
            skipInvalid: true,
            out,
            maxTokens: 24,
            draftLen: 4,
            runs: 1,
            gpu: "cpu",
            threads: testThreads,
            progress: false,
        },
        io,
    );
    assert.equal(exitCode, 0, io.text().err);
    assert.match(io.text().err, /held-out\.jsonl:3: rejected: "prompt_tokens"/);
    assert.match(io.text().out, /tokens\/s/);
    assert.match(io.text().out, losslessRow);
    const summary = JSON.parse(await readFile(out, "utf8")) as GenerateSummary;
    assert.deepEqual(
        summary.prompts.map((p) => p.id),
        ["a", "b"],
    );
    assert.equal(summary.prompts[0]?.category, "code");
    assertLossless(summary);
    assert.equal(summary.draft.kind, "model");
    assert.equal(summary.verifier, "exact");
    assert.ok(summary.alone.tokensPerSecond > 0 && summary.speculative.tokensPerSecond > 0);
    assert.equal(summary.tau, summary.speculative.tokens / summary.speculative.targetSteps);
});

test("a draft model with another vocabulary: exit ≠ 0 and a message saying so", async () => {
    const io = captureIo();
    const { exitCode, summary } = await runGenerateCommand(
        {
            target: targetModel,
            draftModel: otherVocabModel,
            prompt: "hello",
            maxTokens: 4,
            gpu: "cpu",
            threads: testThreads,
            progress: false,
        },
        io,
    );
    assert.notEqual(exitCode, 0);
    assert.equal(summary, undefined);
    assert.match(io.text().err, /Vocabulary mismatch: the drafter .*tiny-qwen3-vocab2\.gguf/);
});

test("usage errors name the problem: two draft sources, no prompt, an unknown --draft", async () => {
    for (const [options, pattern] of [
        [
            { draftModel: quantizedDrafter, draft: "ngram", prompt: "x" },
            /exactly one of --drafter URL, --draft-model FILE\.gguf, --draft ngram; found 2/,
        ],
        [{ draft: "ngram" }, /exactly one of --prompt TEXT, --data FILE\.jsonl/],
        [{ draft: "bigram", prompt: "x" }, /--draft: expected "ngram", found "bigram"/],
    ] as const) {
        const io = captureIo();
        const { exitCode } = await runGenerateCommand({ target: targetModel, progress: false, ...options }, io);
        assert.equal(exitCode, 2, JSON.stringify(options));
        assert.match(io.text().err, pattern);
    }
});

test("the CLI process: --prompt with prompt lookup prints the table and exits 0", async () => {
    const out = join(folder, "cli-summary.json");
    const cli = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));
    const child = spawn(
        process.execPath,
        [
            "--import",
            "tsx",
            cli,
            "generate",
            "--target",
            targetModel,
            "--draft",
            "ngram",
            "--prompt",
            "a b c a b c a b",
            "--max-tokens",
            "16",
            "--gpu",
            "cpu",
            "--threads",
            "1",
            "--no-progress",
            "--out",
            out,
        ],
        { stdio: ["ignore", "pipe", "pipe"] },
    );
    let stdout = "";
    let err = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (err += chunk));
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    assert.equal(code, 0, err);
    assert.match(stdout, /speculative: ngram \(prompt-lookup\)/);
    assert.match(stdout, losslessRow);
    assertLossless(JSON.parse(await readFile(out, "utf8")) as GenerateSummary);
});
