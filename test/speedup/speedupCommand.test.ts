/**
 * `specdraft speedup` end to end on the tiny fixtures (CPU, one thread, few repeats): the table with every k, a best k,
 * the serve / llama-server lines and the JSON; refusals with one line and their exit codes (a missing or out-of-range
 * τ file: 2, a drafter of another vocabulary: 3), and the CLI process's --help.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { runSpeedupCommand, type SpeedupCommandOptions } from "../../src/cli/speedupCommand.js";
import type { SpeedUpReport } from "../../src/speedup/runSpeedUp.js";
import { otherVocabModel, quantizedDrafter, targetModel, testThreads } from "../generate/testModels.js";
import { captureIo } from "../helpers/captureIo.js";

let folder: string;
let tauFile: string;
let heldOutFile: string;
before(async () => {
    folder = await mkdtemp(join(tmpdir(), "specdraft-speedup-"));
    tauFile = join(folder, "tau.json");
    await writeFile(tauFile, JSON.stringify({ tau_by_k: { "1": 1.8, "2": 2.4, "4": 3.1 } }));
    // two conversations of the tiny models' vocabulary, a continuation that repeats its prompt (prompt lookup's case)
    heldOutFile = join(folder, "heldout.jsonl");
    const prompt = [785, 3974, 1876, 3835, 3420, 916, 279, 1567, 562, 13];
    const lines = ["a", "b"].map((category, i) =>
        JSON.stringify({
            id: `c${i}`,
            category,
            prompt_tokens: prompt.slice(i),
            continuation_tokens: [...prompt, ...prompt, ...prompt].slice(i, 24 + i),
        }),
    );
    await writeFile(heldOutFile, `${lines.join("\n")}\n`);
});
after(async () => {
    await rm(folder, { recursive: true, force: true });
});

/** Small and quick: one thread, a short prompt, few repeats. */
const quick = (overrides: Partial<SpeedupCommandOptions> = {}): SpeedupCommandOptions => ({
    target: targetModel,
    draftModel: quantizedDrafter,
    tau: tauFile,
    k: [1, 2, 4, 8],
    gpu: "cpu",
    threads: testThreads,
    promptTokens: 32,
    maxTokens: 64,
    repeats: 3,
    progress: false,
    ...overrides,
});

test("measures and projects: every k in the table, a best k, the lines that use it, the JSON", async () => {
    const json = join(folder, "speedup.json");
    const io = captureIo();
    const { exitCode } = await runSpeedupCommand(quick({ json }), io);
    const { out, err } = io.text();
    assert.equal(exitCode, 0, err);
    for (const k of [1, 2, 4, 8])
        assert.match(out, new RegExp(`^\\s*${k}\\s+\\d+\\.\\d\\d\\*?\\s+\\d`, "m"), `k = ${k}`);
    assert.match(out, /τ\(k\) marked \* derived from τ\(4\) = 3\.10: per-token agreement a = 0\.\d{3}/);
    assert.match(out, /^\s*8\s+\d+\.\d\d\*/m, "τ(8) is derived");
    const best = /best k: (\d+) \(projected \d+\.\d\d× over the target alone\)/.exec(out);
    assert.ok(best, out);
    const k = best[1];
    assert.match(out, new RegExp(`specdraft serve --model \\S+tiny-qwen3-q4_0\\.gguf --draft-len ${k} --gpu cpu`));
    assert.match(
        out,
        new RegExp(
            `llama-server -m \\S+tiny-qwen3\\.gguf -md \\S+tiny-qwen3-q4_0\\.gguf --spec-type draft-simple --spec-draft-n-max ${k} --spec-draft-n-min 0`,
        ),
    );

    const report = JSON.parse(await readFile(json, "utf8")) as SpeedUpReport;
    assert.deepEqual(
        report.rows.map((row) => row.k),
        [1, 2, 4, 8],
    );
    assert.equal(String(report.bestK), k);
    assert.equal(report.device, "cpu");
    assert.equal(report.threads, 1);
    assert.equal(report.tau.file, tauFile);
    assert.deepEqual(report.draftText, { source: "synthetic", contexts: 1 });
    assert.match(out, /drafts timed on a synthetic text without repeats/);
    assert.ok(report.aloneMsPerToken > 0);
    for (const row of report.rows) {
        assert.ok(row.verifyMs > 0 && row.draftMs > 0, `k = ${row.k}: costs measured`);
        const steady = (row.tau * report.aloneMsPerToken) / (row.verifyMs + row.draftMs);
        assert.ok(Math.abs(row.steadySpeedUp - steady) < 1e-9, "steady speed-up = τ · alone ÷ (verify + draft)");
        assert.ok(row.speedUp > 0);
        assert.equal(row.verifyMs, report.verifyMsByM[`m${row.k + 1}`]);
        // the probe's calls: one verification of k + 1 tokens is at least one decode of exactly those tokens
        const split = report.verifySplitByM[`m${row.k + 1}`];
        assert.ok(split !== undefined && split.decodes >= 1 && split.tokens === row.k + 1, JSON.stringify(split));
    }
    assert.equal(
        Math.max(...report.rows.map((row) => row.speedUp)),
        report.rows.find((r) => r.k === report.bestK)?.speedUp,
    );
    assert.match(report.commands.llamaServer, /--spec-type draft-simple/);
});

test("--data: the drafts are timed along the held-out conversations; one k alone; an invalid line is refused", async () => {
    const io = captureIo();
    const { exitCode, report } = await runSpeedupCommand(quick({ data: heldOutFile, k: [4] }), io);
    assert.equal(exitCode, 0, io.text().err);
    assert.deepEqual(report?.draftText, { source: "held-out", contexts: 2 });
    assert.deepEqual(
        report?.rows.map((row) => row.k),
        [4],
    );
    assert.match(io.text().out, /drafts timed along 2 held-out conversations/);
    for (const row of report?.rows ?? []) assert.ok(row.draftMs > 0, `k = ${row.k}`);

    const bad = join(folder, "bad.jsonl");
    await writeFile(bad, '{"id": "x", "prompt_tokens": []}\n');
    const refused = captureIo();
    const result = await runSpeedupCommand(quick({ data: bad }), refused);
    assert.equal(result.exitCode, 2);
    assert.match(refused.text().err, /specdraft speedup: .*bad\.jsonl/);
});

test("--compare-lookahead: the drafts timed with serve's candidates and without, the faster setting kept", async () => {
    const plain = await runSpeedupCommand(quick({ data: heldOutFile, k: [2, 4] }), captureIo());
    assert.equal(plain.report?.lookahead.compared, undefined, "one setting timed unless asked");
    const defaultCandidates = plain.report?.lookahead.candidates ?? 0;
    assert.ok(defaultCandidates > 0 && plain.report?.lookahead.isDefault, "the CPU's default checks candidates");

    const io = captureIo();
    const { exitCode, report } = await runSpeedupCommand(
        quick({ data: heldOutFile, k: [2, 4], compareLookahead: true }),
        io,
    );
    assert.equal(exitCode, 0, io.text().err);
    assert.ok(report !== undefined);
    const compared = report.lookahead.compared ?? {};
    assert.deepEqual(Object.keys(compared).sort(), ["0", String(defaultCandidates)].sort());
    // the rows are the kept setting's: its best is the best of every setting timed
    const best = report.rows.find((row) => row.k === report.bestK);
    const kept = compared[String(report.lookahead.candidates)];
    assert.deepEqual({ k: kept?.k, speedUp: kept?.speedUp }, { k: report.bestK, speedUp: best?.speedUp });
    assert.deepEqual(kept?.draftMsByK, Object.fromEntries(report.rows.map((row) => [String(row.k), row.draftMs])));
    for (const setting of Object.values(compared))
        assert.ok(
            Object.values(setting.draftMsByK).every((ms) => ms > 0) && Object.keys(setting.draftMsByK).length === 2,
        );
    assert.equal(best?.speedUp, Math.max(...Object.values(compared).map((c) => c.speedUp)));
    assert.equal(report.lookahead.isDefault, report.lookahead.candidates === defaultCandidates);
    // the lines that use it say --lookahead 0 exactly where no candidates won
    const off = report.lookahead.candidates === 0;
    assert.equal(report.commands.serve.endsWith(" --lookahead 0"), off, report.commands.serve);
    assert.equal(report.commands.generate.includes(" --draft-lookahead 0 "), off, report.commands.generate);
    assert.match(
        io.text().out,
        /drafts timed with \d+ prompt-lookup candidates? a drafter step.*; best projected by candidates /,
    );
});

test("refusals: one line each, exit 2 for the τ file, 3 for a drafter of another vocabulary", async () => {
    const refuse = async (options: SpeedupCommandOptions, exitCode: number, pattern: RegExp) => {
        const io = captureIo();
        const result = await runSpeedupCommand(options, io);
        const { out, err } = io.text();
        assert.equal(result.exitCode, exitCode, err);
        assert.equal(out, "");
        assert.equal(err.trimEnd().split("\n").length, 1, err);
        assert.match(err, pattern);
    };
    await refuse(
        quick({ tau: join(folder, "none.json") }),
        2,
        /^specdraft speedup: cannot read the τ file .*none\.json/,
    );
    const outOfRange = join(folder, "out-of-range.json");
    await writeFile(outOfRange, JSON.stringify({ tau_by_k: { "2": 3.5 } }));
    await refuse(quick({ tau: outOfRange }), 2, /τ\(2\) must be a number in \[1, 3\], found 3\.5/);
    await refuse(quick({ target: join(folder, "no.gguf") }), 2, /--target: cannot read .*no\.gguf/);
    await refuse(
        quick({ draftModel: otherVocabModel }),
        3,
        /Vocabulary mismatch: the drafter .*tiny-qwen3-vocab2\.gguf/,
    );
});

test("the CLI process: --help lists the options; a bad --k is a usage error", () => {
    const main = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));
    const run = (args: string[]) =>
        spawnSync(process.execPath, ["--import", "tsx", main, "speedup", ...args], { encoding: "utf8" });
    const help = run(["--help"]);
    assert.equal(help.status, 0, help.stderr);
    for (const flag of ["--target", "--draft-model", "--tau", "--k", "--gpu", "--threads", "--prompt-tokens", "--json"])
        assert.ok(help.stdout.includes(flag), flag);
    const bad = run(["--target", targetModel, "--draft-model", quantizedDrafter, "--tau", tauFile, "--k", "2,x"]);
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /--k <list>' argument '2,x' is invalid. expected an integer ≥ 1, found "x"/);
});
