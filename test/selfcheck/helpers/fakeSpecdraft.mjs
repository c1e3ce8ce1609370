#!/usr/bin/env node
// A stand-in for `specdraft serve` that serve.sh can exec (SPECDRAFT="node fakeSpecdraft.mjs") in selfcheck tests:
// it drafts last + 1, last + 2, … (so held-out data whose continuation counts up is drafted perfectly), and
// misbehaves as FAKE_SPECDRAFT_MODE says: ok | never-healthy | exit | flaky | short-draft | slow-start.
// FAKE_SPECDRAFT_RECORD=file: writes {"argv", "pid"} there on start.
import { writeFileSync } from "node:fs";
import { createServer } from "node:http";

const argv = process.argv.slice(2);
const option = (name) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
};
const mode = process.env.FAKE_SPECDRAFT_MODE ?? "ok";
if (process.env.FAKE_SPECDRAFT_RECORD)
    writeFileSync(process.env.FAKE_SPECDRAFT_RECORD, JSON.stringify({ argv, pid: process.pid }));
if (argv[0] !== "serve") {
    console.error(`fake specdraft: expected the serve command, found ${argv[0]}`);
    process.exit(2);
}
if (mode === "exit") {
    console.error("fake specdraft: cannot load the model (on purpose)");
    process.exit(3);
}
const started = Date.now();
let drafts = 0;
const server = createServer((request, response) => {
    const chunks = [];
    request.on("data", (c) => chunks.push(c));
    request.on("end", () => {
        const send = (status, value) => {
            response.writeHead(status, { "content-type": "application/json" });
            response.end(JSON.stringify(value));
        };
        if (request.url === "/health") {
            const loading = mode === "never-healthy" || (mode === "slow-start" && Date.now() - started < 1500);
            return loading ? send(503, { status: "loading" }) : send(200, { status: "ok" });
        }
        if (request.url === "/draft" && request.method === "POST") {
            drafts++;
            if (mode === "flaky" && drafts % 5 === 0)
                return send(500, { error: { code: "internal", message: "flaky on purpose" } });
            const { tokens, n } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
            const k = n ?? Number(option("--draft-len") ?? 16);
            const last = tokens[tokens.length - 1];
            const draft = Array.from({ length: mode === "short-draft" ? k - 1 : k }, (_, i) => last + 1 + i);
            return send(200, { draft });
        }
        send(404, { error: { code: "not_found", message: request.url } });
    });
});
server.listen(Number(option("--port") ?? process.env.PORT ?? 8000), option("--host") ?? "127.0.0.1", () =>
    console.error(`fake specdraft: listening on ${option("--port")}, model ${option("--model")}`),
);
process.on("SIGTERM", () => server.close(() => process.exit(0)));
