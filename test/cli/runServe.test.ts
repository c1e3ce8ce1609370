/**
 * `specdraft serve` as a process: a missing or corrupt model file exits ≠ 0 with one line before listening, a failed
 * load exits 1, SIGTERM lets an in-flight request finish, then exits 0, and a body far over the limit gets its 413
 * under CPU load, not a reset connection.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { cliPath, fakeServerPath, repoRoot, spawnServe } from "../server/serveProcess.js";

const goodModel = join(repoRoot, "test/fixtures/tiny-qwen3.gguf");
let scratch = "";
before(async () => {
    scratch = await mkdtemp(join(tmpdir(), "specdraft-serve-"));
});
after(() => rm(scratch, { recursive: true, force: true }));

async function expectOneLineFailure(args: string[], reason: RegExp) {
    const serve = spawnServe(cliPath, ["serve", "--port", "0", ...args]);
    const code = await serve.exited;
    assert.notEqual(code, 0);
    const [line, ...more] = serve.stderr().trim().split("\n");
    assert.deepEqual(more, [], serve.stderr());
    assert.match(line ?? "", reason);
    assert.doesNotMatch(serve.stderr(), /listening/);
}

test("a missing model file exits 1 with one line", async () => {
    await expectOneLineFailure(
        ["--model", join(scratch, "nope.gguf")],
        /^specdraft serve: Model file .*nope\.gguf does not exist\.$/,
    );
});

test("a file that is not GGUF exits 1 with one line", async () => {
    const path = join(scratch, "random.gguf");
    await writeFile(path, Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 251)));
    await expectOneLineFailure(["--model", path], /random\.gguf is not a valid GGUF file: Invalid GGUF magic/);
});

test("a truncated GGUF exits 1 with one line", async () => {
    const path = join(scratch, "truncated.gguf");
    const bytes = await readFile(goodModel);
    await writeFile(path, bytes.subarray(0, Math.floor(bytes.length / 2)));
    await expectOneLineFailure(
        ["--model", path],
        /truncated\.gguf is truncated: tensor \S+ ends at byte \d+ but the file has \d+ bytes\.$/,
    );
});

test("a model the engine cannot load exits 1 after listening", async () => {
    const serve = spawnServe(fakeServerPath, [goodModel, "--fail-load"]);
    assert.equal(await serve.exited, 1);
    assert.match(serve.stderr(), /listening at http:\/\/127\.0\.0\.1:\d+/);
    assert.match(serve.stderr(), /specdraft serve: cannot load .*tiny-qwen3\.gguf: the fake engine refuses to load\n$/);
});

test("SIGTERM finishes the in-flight draft, then exits 0", async () => {
    const serve = spawnServe(fakeServerPath, [goodModel, "--hold-until-sigterm"]);
    try {
        const [, url] = await serve.waitForLine(/serving .* at (http:\/\/\S+)\n/);
        assert.equal((await fetch(`${url}/health`)).status, 200);
        const inFlight = fetch(`${url}/draft`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ tokens: [100, 200], n: 3 }),
        });
        await serve.waitForLine(/fake: draft started\n/);
        serve.child.kill("SIGTERM");
        const res = await inFlight;
        assert.equal(res.status, 200);
        assert.deepEqual(await res.json(), { draft: [201, 202, 203] });
        assert.equal(await serve.exited, 0);
        assert.match(serve.stderr(), /SIGTERM, finishing in-flight requests/);
        await assert.rejects(fetch(`${url}/health`), "the port must be closed after exit");
    } finally {
        serve.child.kill("SIGKILL");
    }
});

/** Sends the whole request on a fresh connection and only then reads the answer, as the simplest clients do. */
function sendThenRead(url: string, head: string, body: Buffer): Promise<{ status: string; body: string }> {
    const { hostname, port } = new URL(url);
    return new Promise((resolve, reject) => {
        const socket = connect(Number(port), hostname);
        const chunks: Buffer[] = [];
        socket.pause();
        socket.on("data", (chunk: Buffer) => chunks.push(chunk));
        socket.on("error", reject);
        socket.on("close", () => {
            const answer = Buffer.concat(chunks).toString("utf8");
            const split = answer.indexOf("\r\n\r\n");
            resolve({ status: answer.slice(0, answer.indexOf("\r\n")), body: answer.slice(split + 4) });
        });
        socket.write(head);
        socket.write(body, () => socket.resume());
    });
}

test("a 60 MB body gets its 413 JSON, not a reset connection, with two CPU burners beside the server", async (t) => {
    const serve = spawnServe(fakeServerPath, [goodModel]);
    t.after(() => serve.child.kill("SIGKILL"));
    const [, url = ""] = await serve.waitForLine(/serving .* at (http:\/\/\S+)\n/);
    const body = Buffer.from(`{"tokens": [${"1, ".repeat(20_000_000)}1]}`);
    assert.ok(body.length > 60_000_000);
    const refused = {
        error: { code: "body_too_large", message: `Request body too large: expected at most ${1024 * 1024} bytes.` },
    };
    // busy loops in child processes, each ending by itself in 60 s should the test die before killing them
    const burners = [0, 1].map(() =>
        spawn(process.execPath, ["-e", "const end = Date.now() + 60_000; while (Date.now() < end);"], {
            stdio: "ignore",
        }),
    );
    t.after(() => {
        for (const burner of burners) burner.kill("SIGKILL");
    });
    // the server answers before the body is in: it must read the rest, or the client's next write resets the
    // connection and the answer is lost
    for (const connection of ["close", "keep-alive"]) {
        const head = `POST /draft HTTP/1.1\r\nhost: ${new URL(url).host}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: ${connection}\r\n\r\n`;
        const answer = await sendThenRead(url, head, body);
        assert.match(answer.status, /^HTTP\/1\.1 413 /, `connection: ${connection}`);
        assert.deepEqual(JSON.parse(answer.body), refused);
    }
    // fetch reads the answer while it still sends
    for (let attempt = 0; attempt < 3; attempt++) {
        const res = await fetch(`${url}/draft`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body,
        });
        assert.equal(res.status, 413);
        assert.deepEqual(await res.json(), refused);
    }
});
