/**
 * deploy/haproxy.cfg, as committed, run by Debian's HAProxy in front of real `specdraft serve` replicas of the default
 * drafter on the CPU, walked with the held-out data (every 16th conversation of data/lab-heldout.jsonl):
 * τ is one server's, a request evaluates as few tokens as on one server (the conversation header keeps each
 * conversation on the replica holding its KV cache), a request without a key is still answered, adding a third
 * replica moves about a third of the conversations (all of them to it), a replica still loading gets no request until
 * it is ready, and a walk during which one replica is killed and another drained finishes without a failed request.
 */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { conversationHeader } from "../../src/client/conversationKey.js";
import { createSpecdraftClient } from "../../src/client/createDraftClient.js";
import { findFreePort } from "../../src/selfcheck/startServeScript.js";
import { startServer } from "../../src/server/startServer.js";
import { readHeldOutFile } from "../../src/validate/readHeldOutFile.js";
import { summarizeWalk } from "../../src/validate/summarizeWalk.js";
import type { Conversation, WalkSummary } from "../../src/validate/types.js";
import { walkHeldOut } from "../../src/validate/walkHeldOut.js";
import { captureIo } from "../helpers/captureIo.js";
import { sample } from "../helpers/metricSamples.js";
import { FakeEngine } from "../server/FakeEngine.js";
import { cliPath, repoRoot, type ServeProcess, spawnServe } from "../server/serveProcess.js";
import { testServeOptions } from "../server/testServeOptions.js";

const configPath = path.join(repoRoot, "deploy/haproxy.cfg");
const defaultModel = path.join(repoRoot, "models/specdraft-default.gguf");
/** Debian's package puts it in /usr/sbin, which a user's PATH may lack. */
const haproxyPath = existsSync("/usr/sbin/haproxy") ? "/usr/sbin/haproxy" : "haproxy";
/** The header deploy/haproxy.cfg adds to every answer: the name of the replica that gave it. */
const replicaHeader = "x-specdraft-replica";
const draftLength = 16;
/** Conversations walked at once: half of a replica's streams, so neither replica evicts a conversation's KV cache. */
const concurrency = 8;
/**
 * The walks compared token for token go one request at a time: a replica batches the requests waiting at once into one
 * decode, which ones depends on timing, and llama.cpp's greedy tokens depend on how tokens are split into decodes. Alone,
 * every decode holds one request on both paths. (No two of these prompts share the slot pool's minimum reused prefix,
 * so which conversation a replica served before does not change how the next one is split either.)
 */
const exactConcurrency = 1;

/** A replica in the proxy's topology: `rN` is SPECDRAFT_REPLICA_N. */
interface Member {
    name: string;
    port: number;
}

interface Replica extends Member {
    url: string;
    process: ServeProcess;
}

/** What before() starts, used by the tests in order. */
interface Setup {
    conversations: Conversation[];
    r1: Replica;
    r2: Replica;
    r3: Replica;
    proxy: ReturnType<typeof startHaproxy>;
}

let dir = "";
let setup: Setup | undefined;
const replicas: Replica[] = [];
/** The single server's walk, the reference for every walk through the proxy. */
let alone: WalkSummary | undefined;

before(async () => {
    assert.ok(haproxyVersion().startsWith("2."), "haproxy 2.x is needed: apt-get install -y haproxy (.ci/run does)");
    dir = await mkdtemp(path.join(tmpdir(), "specdraft-deploy-"));
    const heldOut = await readHeldOutFile(path.join(repoRoot, "data/lab-heldout.jsonl"));
    const conversations = heldOut.conversations.filter((_, i) => i % 16 === 0);
    assert.equal(conversations.length, 24);
    const [proxyPort, statsPort, ...replicaPorts] = await distinctFreePorts(5);
    assert.ok(proxyPort !== undefined && statsPort !== undefined);
    // three replicas load side by side; r3 is first the single server, then the replica that joins
    replicas.push(...(await Promise.all(replicaPorts.map((port, i) => startReplica(`r${i + 1}`, port)))));
    const [r1, r2, r3] = replicas;
    assert.ok(r1 && r2 && r3);
    const proxy = startHaproxy(proxyPort, statsPort, path.join(dir, "topology.cfg"));
    setup = { conversations, r1, r2, r3, proxy };
    await proxy.start([r1, r2]);
});

after(async () => {
    await setup?.proxy.stop();
    for (const replica of replicas) replica.process.child.kill("SIGKILL");
    await Promise.all(replicas.map((replica) => replica.process.exited));
    await rm(dir, { recursive: true, force: true });
});

function started(): Setup {
    assert.ok(setup !== undefined, "before() did not finish");
    return setup;
}

test("through the proxy τ is one server's, and a request evaluates as few tokens as on one server", async () => {
    const { r1, r2, r3, proxy } = started();
    const single = await measureWalk(r3.url, [r3]);
    alone = single.summary;
    assert.equal(alone.failures.total, 0);
    const proxied = await measureWalk(proxy.url, [r1, r2]);
    assert.equal(proxied.summary.failures.total, 0);
    assert.equal(proxied.summary.tau, alone.tau);
    assert.equal(proxied.summary.steps, alone.steps);
    // both replicas took a share of the conversations
    assert.ok(
        proxied.perReplica.every((requests) => requests > 0),
        JSON.stringify(proxied.perReplica),
    );
    // a conversation's first request evaluates its prompt, the others only what the KV cache lacks (~1 token): a
    // conversation whose requests were spread over replicas would evaluate its whole context again and again
    assert.ok(
        proxied.evaluatedPerRequest <= single.evaluatedPerRequest * 1.05,
        `${proxied.evaluatedPerRequest} tokens evaluated per request through the proxy, ${single.evaluatedPerRequest} on one server`,
    );
});

test("a request without a key is answered by the least-loaded replica; a request_id keeps its replica", async () => {
    const { conversations, r3, proxy } = started();
    const prompt = conversations[0]?.promptTokens;
    const body = { tokens: prompt, n: 4 };
    const expected = (await postDraft(r3.url, body)).json;
    // eight at once: least-connections gives each replica some of them
    const keyless = await Promise.all(Array.from({ length: 8 }, () => postDraft(proxy.url, body)));
    for (const answer of keyless) assert.deepEqual(answer.json, expected);
    assert.deepEqual(new Set(keyless.map((answer) => answer.replica)), new Set(["r1", "r2"]));
    // the TensorRT-LLM form's request_id is the key when there is no header
    const trt = { prefix: prompt, n: 4, request_id: "trt-7" };
    const answers = await Promise.all(Array.from({ length: 6 }, () => postDraft(proxy.url, trt)));
    assert.equal(new Set(answers.map((answer) => answer.replica)).size, 1);
    for (const answer of answers) assert.equal((answer.json as { request_id: string }).request_id, "trt-7");
});

/** Conversation keys for the routing tests: fixed, so HAProxy's ring (set by the server ids) maps them the same every run. */
const keys = Array.from({ length: 300 }, (_, i) => createHash("sha256").update(`c${i}`).digest("hex").slice(0, 32));

test("adding a third replica moves about a third of the conversations, every one of them to it", async () => {
    const { r1, r2, r3, proxy } = started();
    const before = await replicaOfEach(proxy.url, keys);
    assert.deepEqual(new Set(before.values()), new Set(["r1", "r2"]));
    await proxy.reload([r1, r2, r3]);
    const afterAdding = await replicaOfEach(proxy.url, keys);
    const moved = keys.filter((key) => afterAdding.get(key) !== before.get(key));
    // consistent hashing: no conversation changes hands between the replicas that were already there
    assert.deepEqual(new Set(moved.map((key) => afterAdding.get(key))), new Set(["r3"]));
    const share = moved.length / keys.length;
    assert.ok(share > 0.2 && share < 0.47, `${moved.length} of ${keys.length} conversations moved`);
});

test("a replica still loading gets no request, and takes its share of the conversations once ready", async () => {
    const { r1, r2, r3, proxy } = started();
    const before = await replicaOfEach(proxy.url, keys);
    // specdraft's own server, listening with /health 503 "loading", its engine (a fake) loaded when the test says so
    let finishLoading = (): void => {};
    const loaded = new Promise<void>((resolve) => {
        finishLoading = resolve;
    });
    const io = captureIo();
    const loading = await startServer(
        testServeOptions(defaultModel),
        async ({ observer }) => {
            await loaded;
            return new FakeEngine({ observer });
        },
        io,
    );
    try {
        const r4 = { name: "r4", port: Number(new URL(loading.url).port) };
        await proxy.reload([r1, r2, r3, r4]);
        // HAProxy starts a new server as up: until its checks fail, its 503 answers are retried on the others
        const whileLoading = await replicaOfEach(proxy.url, keys);
        assert.ok(![...whileLoading.values()].includes("r4"), "a loading replica answered");
        finishLoading();
        await loading.ready;
        await proxy.waitUntilUp("r4");
        const ready = await replicaOfEach(proxy.url, keys);
        const moved = keys.filter((key) => ready.get(key) !== before.get(key));
        assert.deepEqual(new Set(moved.map((key) => ready.get(key))), new Set(["r4"]));
        assert.ok(moved.length > 0.12 * keys.length && moved.length < 0.38 * keys.length, `${moved.length} moved`);
    } finally {
        await proxy.reload([r1, r2, r3]);
        await loading.close();
    }
});

test("a walk during which one replica is killed and another drained finishes without a failed request", async () => {
    assert.ok(alone !== undefined, "the first test walks one server");
    const { conversations, r1, r2, r3, proxy } = started();
    const totalSteps = alone.steps;
    const redispatchedBefore = await proxy.redispatches();
    const r3Before = await readCounters(r3);
    let steps = 0;
    let drained: Promise<number> | undefined;
    const client = createSpecdraftClient(proxy.url, { name: "proxy", timeoutMs: 30_000 });
    const walk = await walkHeldOut(conversations, client, {
        draftLength,
        concurrency,
        onProgress: () => {
            steps++;
            if (steps === Math.floor(totalSteps / 3)) r1.process.child.kill("SIGKILL");
            if (steps === Math.floor((2 * totalSteps) / 3)) {
                r2.process.child.kill("SIGTERM");
                drained = r2.process.exited;
            }
        },
    });
    const summary = summarizeWalk(walk);
    assert.equal(summary.failures.total, 0, JSON.stringify(summary.failures));
    // not exactly one server's: a conversation that moves has its context prefilled in one batch on its new replica,
    // whose sums differ from the step-by-step ones at near ties (3 of these 308 drafts differ when each is prefilled
    // afresh, on the CPU, 2026-12-01)
    assert.ok(
        Math.abs((summary.tau ?? 0) - (alone.tau ?? 0)) < 0.02 * (alone.tau ?? 0),
        `τ ${summary.tau}, alone ${alone.tau}`,
    );
    assert.equal(await r1.process.exited, -1);
    assert.ok(drained !== undefined);
    // the drained replica finished what it had and exited 0
    assert.equal(await drained, 0, r2.process.stderr());
    // requests that met the dead or draining replicas went to another one, and the last third was r3's alone
    assert.ok((await proxy.redispatches()) > redispatchedBefore, "no request was redispatched");
    const r3Requests = (await readCounters(r3)).requests - r3Before.requests;
    assert.ok(r3Requests >= totalSteps / 3 - concurrency, `r3 answered ${r3Requests} of ${summary.requests}`);
});

test("with no replica left the proxy answers 503 no_replica in specdraft's error shape", async () => {
    const { r1, r2, r3, proxy } = started();
    for (const replica of [r1, r2, r3]) replica.process.child.kill("SIGTERM");
    await Promise.all([r1, r2, r3].map((replica) => replica.process.exited));
    const answer = await postDraft(proxy.url, { tokens: [1, 2, 3], n: 2 }, "any-conversation");
    assert.equal(answer.status, 503);
    assert.equal((answer.json as { error: { code: string } }).error.code, "no_replica");
});

/** A replica of the default drafter on the CPU: one thread, so three replicas and the proxy share 2 cores. */
async function startReplica(name: string, port: number): Promise<Replica> {
    const process = spawnServe(cliPath, [
        "serve",
        ...["--port", String(port), "--gpu", "cpu", "--threads", "1", "--streams", String(2 * concurrency)],
        ...["--context", "1024"],
    ]);
    await process.waitForLine(/specdraft: serving .* at http/);
    const url = `http://127.0.0.1:${port}`;
    // one draft, so that its request counters exist before the first walk reads them
    assert.equal((await postDraft(url, { tokens: [1], n: 1 })).status, 200);
    return { name, url, port, process };
}

/**
 * Walks the conversations one at a time against `url` and reads what `replicasBehind` did meanwhile: tokens evaluated
 * per /draft request over all of them, and each one's requests.
 */
async function measureWalk(url: string, replicasBehind: Replica[]) {
    const { conversations } = started();
    const counters = () => Promise.all(replicasBehind.map(readCounters));
    const before = await counters();
    const client = createSpecdraftClient(url, { name: "walk", timeoutMs: 30_000 });
    const summary = summarizeWalk(
        await walkHeldOut(conversations, client, { draftLength, concurrency: exactConcurrency }),
    );
    const delta = (await counters()).map((now, i) => ({
        requests: now.requests - (before[i]?.requests ?? Number.NaN),
        evaluated: now.evaluated - (before[i]?.evaluated ?? Number.NaN),
    }));
    const perReplica = delta.map((d) => d.requests);
    const evaluated = delta.reduce((sum, d) => sum + d.evaluated, 0);
    const requests = perReplica.reduce((a, b) => a + b, 0);
    assert.equal(requests, summary.requests);
    return { summary, perReplica, evaluatedPerRequest: evaluated / requests };
}

async function readCounters(replica: Replica): Promise<{ evaluated: number; requests: number }> {
    const text = await (await fetch(`${replica.url}/metrics`)).text();
    return {
        evaluated: sample(text, "specdraft_prefix_tokens_evaluated_total"),
        requests: sample(text, "specdraft_http_requests_total", '{route="/draft",method="POST",status="200"}'),
    };
}

/** Which replica answers one small draft for each conversation key (eight requests at a time). */
async function replicaOfEach(proxyUrl: string, conversationKeys: readonly string[]): Promise<Map<string, string>> {
    const replicaOf = new Map<string, string>();
    for (let i = 0; i < conversationKeys.length; i += 8) {
        const batch = conversationKeys.slice(i, i + 8);
        const answers = await Promise.all(
            batch.map(async (key) => ({ key, answer: await postDraft(proxyUrl, { tokens: [1], n: 1 }, key) })),
        );
        for (const { key, answer } of answers) {
            assert.equal(answer.status, 200, JSON.stringify(answer.json));
            replicaOf.set(key, answer.replica);
        }
    }
    return replicaOf;
}

async function postDraft(
    url: string,
    body: unknown,
    conversation?: string,
): Promise<{ status: number; json: unknown; replica: string }> {
    const response = await fetch(`${url}/draft`, {
        method: "POST",
        headers: {
            "content-type": "application/json",
            ...(conversation === undefined ? {} : { [conversationHeader]: conversation }),
        },
        body: JSON.stringify(body),
    });
    return { status: response.status, json: await response.json(), replica: response.headers.get(replicaHeader) ?? "" };
}

/**
 * `count` free loopback ports, all different: a port findFreePort saw free is free again once it returns, so two calls
 * may give the same one (two HAProxy frontends would then share it through SO_REUSEPORT).
 */
async function distinctFreePorts(count: number): Promise<number[]> {
    const ports = new Set<number>();
    while (ports.size < count) ports.add(await findFreePort());
    return [...ports];
}

function haproxyVersion(): string {
    try {
        return /version (\S+)/.exec(execFileSync(haproxyPath, ["-v"], { encoding: "utf8" }))?.[1] ?? "";
    } catch {
        return "";
    }
}

/**
 * HAProxy in master-worker mode with deploy/haproxy.cfg after a topology file (the proxy's address and the replicas,
 * as deploy/replicas.sh writes it); reload() rewrites the topology and reloads the way an operator would (SIGUSR2).
 */
function startHaproxy(port: number, statsPort: number, topologyPath: string) {
    const statsUrl = `http://127.0.0.1:${statsPort}`;
    let child: ReturnType<typeof spawn> | undefined;
    let stderr = "";
    const url = `http://127.0.0.1:${port}`;
    const writeTopology = (behind: Member[]) =>
        writeFile(
            topologyPath,
            [
                "global",
                `    unsetenv ${Array.from({ length: 8 }, (_, i) => `SPECDRAFT_REPLICA_${i + 1}`).join(" ")}`,
                `    setenv SPECDRAFT_PROXY_BIND 127.0.0.1:${port}`,
                `    setenv SPECDRAFT_PROXY_STATS_BIND 127.0.0.1:${statsPort}`,
                ...behind.map(
                    (replica) => `    setenv SPECDRAFT_REPLICA_${replica.name.slice(1)} 127.0.0.1:${replica.port}`,
                ),
                "",
            ].join("\n"),
        );
    const loads = () => stderr.match(/Loading success/g)?.length ?? 0;
    const waitFor = async (condition: () => boolean | Promise<boolean>, what: string) => {
        for (let waited = 0; !(await condition()); waited += 50) {
            assert.ok(waited < 20_000 && child?.exitCode === null, `haproxy: no ${what}:\n${stderr}`);
            await new Promise((resolve) => setTimeout(resolve, 50));
        }
    };
    return {
        url,
        async start(behind: Member[]) {
            await writeTopology(behind);
            child = spawn(haproxyPath, ["-W", "-f", topologyPath, "-f", configPath], {
                stdio: ["ignore", "ignore", "pipe"],
            });
            child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
                stderr += chunk;
            });
            await waitFor(() => loads() >= 1, "worker started");
        },
        async reload(behind: Member[]) {
            const before = loads();
            await writeTopology(behind);
            child?.kill("SIGUSR2");
            await waitFor(() => loads() > before, "reload");
            // the former worker stops listening once the new one runs; new connections then reach the new one
            await waitFor(
                () => /Former worker \(\d+\) exited/.test(stderr.split("Reloading HAProxy").at(-1) ?? ""),
                "old worker exit",
            );
        },
        /** Requests sent to another replica than the first one chosen, from HAProxy's own Prometheus metrics. */
        async redispatches(): Promise<number> {
            const text = await (await fetch(`${url}/metrics`)).text();
            return sample(text, "haproxy_backend_redispatch_warnings_total", '{proxy="by_conversation"}');
        },
        /** Resolves once HAProxy's checks have marked replica `name` up. */
        async waitUntilUp(name: string) {
            const labels = `{proxy="by_conversation",server="${name}",state="UP"}`;
            const isUp = async () =>
                sample(await (await fetch(`${statsUrl}/metrics`)).text(), "haproxy_server_status", labels) === 1;
            await waitFor(isUp, `${name} up`);
        },
        async stop() {
            if (child === undefined || child.exitCode !== null) return;
            const exited = new Promise((resolve) => child?.once("exit", resolve));
            child.kill("SIGTERM");
            await exited;
        },
    };
}
