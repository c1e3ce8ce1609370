/**
 * τ files and the projection's pure parts: both forms of the file, derived τ(k) from the per-token agreement, refusals
 * naming the file, the agreement's inversion and the speed-up at a given τ.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { readTauFile, TauFileError } from "../../src/speedup/readTauFile.js";
import { commandLines } from "../../src/speedup/runSpeedUp.js";
import {
    agreementFromTau,
    expectedTokensPerStep,
    type StepCosts,
    speedUpAtTau,
} from "../../src/speedup/speedUpModel.js";

let folder: string;
before(async () => {
    folder = await mkdtemp(join(tmpdir(), "specdraft-tau-"));
});
after(async () => {
    await rm(folder, { recursive: true, force: true });
});

async function tauFile(name: string, content: string): Promise<string> {
    const file = join(folder, name);
    await writeFile(file, content);
    return file;
}

test("agreementFromTau inverts τ(k) = (1 − a^(k+1)) ÷ (1 − a), edges included", () => {
    for (const a of [0.3, 0.75, 0.81, 0.95]) {
        const tau = expectedTokensPerStep(a, 16);
        assert.ok(Math.abs(agreementFromTau(tau, 16) - a) < 1e-9, `a = ${a}`);
    }
    assert.equal(agreementFromTau(1, 4), 0);
    assert.equal(agreementFromTau(5, 4), 1);
    assert.throws(() => agreementFromTau(5.5, 4), /τ\(4\) must be in \[1, 5\], got 5.5/);
    assert.throws(() => agreementFromTau(0.9, 4), RangeError);
});

test("speed-up at a given τ: τ · alone ÷ (verify(k + 1) + draft(k))", () => {
    const costs: StepCosts = {
        alone: 10,
        verify: new Map([
            [1, 10],
            [5, 14],
        ]),
        draft: new Map([
            [1, 1],
            [4, 4],
        ]),
    };
    const { stepMs, speedUp } = speedUpAtTau(costs, 3, 4);
    assert.equal(stepMs, 18);
    assert.equal(speedUp, (3 * 10) / 18);
});

test("tau_by_k: read where given, derived from the largest k elsewhere", async () => {
    const file = await tauFile("by-k.json", JSON.stringify({ tau_by_k: { "2": 2.4, "8": 3.6 } }));
    const tau = await readTauFile(file, [2, 4, 8]);
    assert.equal(tau.tau.get(2), 2.4);
    assert.equal(tau.tau.get(8), 3.6);
    assert.deepEqual([...tau.derived], [4]);
    const a = tau.derivedFrom?.agreement ?? Number.NaN;
    assert.ok(Math.abs(expectedTokensPerStep(a, 8) - 3.6) < 1e-9);
    assert.ok(Math.abs((tau.tau.get(4) ?? 0) - expectedTokensPerStep(a, 4)) < 1e-12);
    assert.equal(tau.derivedFrom?.k, 8);
});

test("one τ: at k = 16 unless the file names k", async () => {
    const at16 = await readTauFile(await tauFile("one.json", '{"tau": 5.1}'), [1, 16]);
    assert.equal(at16.tau.get(16), 5.1);
    assert.deepEqual([...at16.derived], [1]);
    assert.ok(Math.abs((at16.derivedFrom?.agreement ?? 0) - 0.81) < 0.002, "τ 5.1 at 16 is a ≈ 0.81");
    const at4 = await readTauFile(await tauFile("one-k4.json", '{"tau": 3, "k": 4}'), [4]);
    assert.equal(at4.tau.get(4), 3);
    assert.equal(at4.derivedFrom, undefined);
});

test("refusals name the file and what was expected", async () => {
    const refuse = async (content: string | undefined, pattern: RegExp) => {
        const file = content === undefined ? join(folder, "missing.json") : await tauFile("bad.json", content);
        await assert.rejects(readTauFile(file, [1, 2]), (error: unknown) => {
            assert.ok(error instanceof TauFileError);
            assert.match(error.message, pattern);
            return true;
        });
    };
    await refuse(undefined, /cannot read the τ file .*missing\.json: ENOENT/);
    await refuse("{", /bad\.json: not JSON/);
    await refuse('{"tau_by_k": {"4": 6}}', /τ\(4\) must be a number in \[1, 5\], found 6/);
    await refuse('{"tau_by_k": {"4": 0.5}}', /τ\(4\) must be a number in \[1, 5\], found 0.5/);
    await refuse('{"tau_by_k": {"0": 1}}', /expected k an integer ≥ 1, found 0/);
    await refuse('{"tau_by_k": {}}', /found neither/);
    await refuse('{"tokens": 3}', /expected \{"tau_by_k"/);
});

test("command lines: the k, quoted paths, llama.cpp's draft-simple flags", () => {
    const lines = commandLines("/m/target.gguf", "/m/my drafter.gguf", 6, { gpu: "cuda", threads: 4, maxTokens: 128 });
    assert.equal(lines.serve, "specdraft serve --model '/m/my drafter.gguf' --draft-len 6 --gpu cuda");
    assert.equal(
        lines.llamaServer,
        "llama-server -m /m/target.gguf -md '/m/my drafter.gguf' --spec-type draft-simple --spec-draft-n-max 6 " +
            "--spec-draft-n-min 0 -t 4 -td 4",
    );
    assert.match(lines.generate, /--draft-len 6 .*--max-tokens 128 --gpu cuda --threads 4$/);
    // candidates other than the backend's default: serve's flag and generate's, nothing for llama.cpp
    const off = commandLines("t.gguf", "d.gguf", 4, { gpu: "auto", threads: 2, maxTokens: 64, lookahead: 0 });
    assert.equal(off.serve, "specdraft serve --model d.gguf --draft-len 4 --lookahead 0");
    assert.match(off.generate, /--max-tokens 64 --draft-lookahead 0 --threads 2$/);
    assert.doesNotMatch(off.llamaServer, /lookahead/);
});
