/**
 * A folder packed with candidates and one packed without them serve the same drafts: selfcheck walks both (a real
 * `specdraft serve` of the tiny fixture through serve.sh) over conversations whose continuations are the fixture's
 * own greedy text, where every draft token that is not the plain drafter's would cut a step short and change τ.
 */
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { runPack } from "../../src/cli/packCommand.js";
import { runSelfcheckCommand } from "../../src/cli/selfcheckCommand.js";
import { loadEngine } from "../../src/engine/loadEngine.js";
import type { ArchitectureFile } from "../../src/pack/drafterFolder.js";
import type { Conversation } from "../../src/validate/types.js";
import { randomPrompts } from "../engine/helpers/engineFixtures.js";
import { captureIo } from "../helpers/captureIo.js";
import { writeHeldOut } from "../helpers/writeHeldOut.js";
import { cliPath } from "../server/serveProcess.js";

const model = "test/fixtures/tiny-qwen3.gguf";

test("selfcheck's walk gives the same τ from a folder packed with --lookahead 4 as from one with --lookahead 0", async (t) => {
    const dir = await mkdtemp(path.join(tmpdir(), "specdraft-selfcheck-lookahead-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const plain = await loadEngine({
        modelPath: model,
        streams: 1,
        contextSize: 512,
        gpu: "cpu",
        threads: 1,
        lookahead: 0,
    });
    const conversations: Conversation[] = [];
    for (const [i, prompt] of randomPrompts(4, 4000, 113).entries())
        conversations.push({
            id: `c${i}`,
            promptTokens: prompt,
            continuationTokens: await plain.draft(prompt, 64),
            lineNumber: 0,
        });
    await plain.close();
    const data = path.join(dir, "held.jsonl");
    await writeHeldOut(data, conversations);

    const spawnSpecdraft = `${process.execPath} --import ${import.meta.resolve("tsx")} ${cliPath}`;
    const results: { tau: string; architecture: ArchitectureFile }[] = [];
    for (const lookahead of [0, 4]) {
        const out = path.join(dir, `lookahead-${lookahead}`);
        const pack = captureIo();
        assert.equal(await runPack({ model, out, base: "Qwen/Qwen3-8B@abc1234", lookahead }, pack), 0, pack.text().err);
        const io = captureIo();
        const exitCode = await runSelfcheckCommand(
            {
                dir: out,
                data,
                startupTimeoutSeconds: 60,
                progress: false,
                concurrency: 1,
                env: { SPECDRAFT: spawnSpecdraft },
            },
            io,
        );
        const { out: text, err } = io.text();
        assert.equal(exitCode, 0, text + err);
        assert.match(
            text,
            new RegExp(`lookahead ${lookahead}, base`),
            "the prerequisites line names the folder's setting",
        );
        const tau = /τ ([\d.]+) on what was walked/.exec(text)?.[1];
        assert.ok(tau, text);
        results.push({ tau, architecture: JSON.parse(await readFile(path.join(out, "architecture.json"), "utf8")) });
    }
    const [off, on] = results;
    assert.ok(off && on);
    assert.equal(off.architecture.lookahead, 0);
    assert.equal(on.architecture.lookahead, 4);
    // the continuations are the drafter's own: every draft token is accepted, with candidates or without
    assert.equal(on.tau, off.tau);
    assert.ok(Number(off.tau) > 10, `τ ${off.tau}`);
});
