/**
 * `--data` with invalid lines, in all three commands that read it: an error by default (exit 2, every bad line named,
 * nothing run), `--skip-invalid` goes on with the valid ones; no valid conversation is exit 2 everywhere.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { exitCodes } from "../../src/cli/exitCodes.js";
import { runGenerateCommand } from "../../src/cli/generateCommand.js";
import { loadHeldOut } from "../../src/cli/loadHeldOut.js";
import { runSelfcheckCommand } from "../../src/cli/selfcheckCommand.js";
import { runValidate } from "../../src/cli/validateCommand.js";
import { captureIo } from "../helpers/captureIo.js";
import { conversation } from "../helpers/continuationOracle.js";
import { writeHeldOut } from "../helpers/writeHeldOut.js";

let dir = "";
/** Two valid conversations and two invalid lines (2 and 4). */
let mixed = "";
/** Only invalid lines. */
let allBad = "";

before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "specdraft-heldout-"));
    mixed = path.join(dir, "mixed.jsonl");
    allBad = path.join(dir, "bad.jsonl");
    await writeHeldOut(
        mixed,
        [conversation("a", 1, 5)],
        ['{"id": "broken"', JSON.stringify({ id: "b", prompt_tokens: [1], continuation_tokens: [2] }), "[1, 2]"],
    );
    await writeHeldOut(allBad, [], ["not json"]);
});

after(async () => {
    await rm(dir, { recursive: true, force: true });
});

test("loadHeldOut: invalid lines are named and refused; with skipInvalid the valid conversations come back", async () => {
    let io = captureIo();
    assert.deepEqual(await loadHeldOut("validate", mixed, {}, io), { exitCode: exitCodes.usage });
    const { err } = io.text();
    assert.match(err, /mixed\.jsonl:2: rejected: not JSON/);
    assert.match(err, /mixed\.jsonl:4: rejected: expected a JSON object, found \[1,2\]/);
    assert.match(
        err,
        /specdraft validate: .*mixed\.jsonl has 2 invalid lines \(named above\).*--skip-invalid.*2 valid/,
    );

    io = captureIo();
    const heldOut = await loadHeldOut("validate", mixed, { skipInvalid: true }, io);
    assert.ok(!("exitCode" in heldOut));
    assert.deepEqual(
        heldOut.conversations.map((c) => c.id),
        ["a", "b"],
    );
    assert.equal(heldOut.rejected.length, 2);
    assert.match(io.text().err, /mixed\.jsonl:2: rejected/);

    io = captureIo();
    assert.deepEqual(await loadHeldOut("generate", allBad, { skipInvalid: true }, io), { exitCode: exitCodes.usage });
    assert.match(io.text().err, /specdraft generate: .*bad\.jsonl has no valid conversations \(1 rejected lines\)/);
    io = captureIo();
    assert.deepEqual(await loadHeldOut("selfcheck", path.join(dir, "missing.jsonl"), {}, io), {
        exitCode: exitCodes.usage,
    });
    assert.match(io.text().err, /specdraft selfcheck: cannot read --data .*missing\.jsonl/);
});

test("validate, selfcheck and generate refuse invalid lines before any work, and go on with --skip-invalid", async () => {
    // nothing listens on port 9 and nothing is at `nowhere`: each command fails differently once it starts working
    const nowhere = path.join(dir, "nowhere");
    const commands = {
        validate: (data: string, skipInvalid: boolean, io: ReturnType<typeof captureIo>) =>
            runValidate(
                { server: ["http://127.0.0.1:9"], data, skipInvalid, progress: false, timeoutMs: 2000 },
                io,
            ).then((r) => r.exitCode),
        selfcheck: (data: string, skipInvalid: boolean, io: ReturnType<typeof captureIo>) =>
            runSelfcheckCommand({ dir: nowhere, data, skipInvalid, progress: false }, io),
        generate: (data: string, skipInvalid: boolean, io: ReturnType<typeof captureIo>) =>
            runGenerateCommand({ target: nowhere, draft: "ngram", data, skipInvalid, progress: false }, io).then(
                (r) => r.exitCode,
            ),
    };
    // what each exits with once it has gone past the data: validate finds no server (1), selfcheck fails its gates (1),
    // generate cannot read the target (1)
    const afterData = { validate: exitCodes.failed, selfcheck: exitCodes.failed, generate: exitCodes.failed };
    for (const [name, run] of Object.entries(commands) as [keyof typeof commands, (typeof commands)["validate"]][]) {
        let io = captureIo();
        assert.equal(await run(mixed, false, io), exitCodes.usage, `${name}: ${io.text().err}`);
        assert.match(io.text().err, /mixed\.jsonl:2: rejected.*\n.*mixed\.jsonl:4: rejected/, name);
        assert.match(io.text().err, new RegExp(`specdraft ${name}: .*2 invalid lines`), name);

        io = captureIo();
        assert.equal(await run(mixed, true, io), afterData[name], `${name} --skip-invalid: ${io.text().err}`);
        assert.doesNotMatch(io.text().err, /invalid lines/, name);

        io = captureIo();
        assert.equal(await run(allBad, true, io), exitCodes.usage, `${name}: ${io.text().err}`);
        assert.match(io.text().err, /no valid conversations/, name);
    }
});
