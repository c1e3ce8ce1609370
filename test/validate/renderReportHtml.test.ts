/**
 * report.html opened in a real headless Chromium (Debian's, driven by playwright-core): the plots render with the
 * right number of bars, the page loads nothing from outside, and logs no errors.
 * Set REPORT_SCREENSHOT=/path.png to keep a screenshot of the comparison page for a look by eye.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { pathToFileURL } from "node:url";
import { type Browser, chromium } from "playwright-core";
import { runValidate } from "../../src/cli/validateCommand.js";
import { captureIo } from "../helpers/captureIo.js";
import { conversation, draftWithPlantedError, locate } from "../helpers/continuationOracle.js";
import { type FakeServer, sendJson, startFakeServer } from "../helpers/startFakeServer.js";
import { writeHeldOut } from "../helpers/writeHeldOut.js";

const chromiumPath = "/usr/bin/chromium";
const launchArgs = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];
const draftLength = 6;
const conversations = [
    conversation("a", 1, 30, "code"),
    conversation("b", 2, 25, "code"),
    conversation("c", 3, 18, "chat"),
    conversation("d", 4, 12, "math"),
    conversation("e", 5, 40),
];

let dir = "";
let browser: Browser | undefined;
const servers: FakeServer[] = [];

/** Right for a varying number of leading positions, so the histogram has several bars, with varying latency. */
function drafter(bias: number): Promise<FakeServer> {
    return startFakeServer(async (_path, body, response) => {
        const { tokens, n } = body as { tokens: number[]; n: number };
        const hit = locate(conversations, tokens);
        if (!hit) return sendJson(response, 400, {});
        await new Promise((resolve) => setTimeout(resolve, (tokens.length * 13) % 9));
        sendJson(response, 200, {
            draft: draftWithPlantedError(hit.conversation, hit.position, n, (hit.position + bias) % (n + 2)),
        });
    });
}

before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "specdraft-report-"));
    const [base, distilled] = [await drafter(0), await drafter(3)];
    servers.push(base, distilled);
    const data = path.join(dir, "held.jsonl");
    await writeHeldOut(data, conversations);
    const io = captureIo();
    const { exitCode } = await runValidate(
        {
            server: [`base=${base.url}`, `distilled=${distilled.url}`],
            data,
            draftLen: draftLength,
            report: path.join(dir, "out"),
            progress: false,
        },
        io,
    );
    assert.equal(exitCode, 0, io.text().err);
    assert.ok(existsSync(chromiumPath), `${chromiumPath} is missing: apt-get install -y chromium`);
    browser = await chromium.launch({ executablePath: chromiumPath, args: launchArgs });
});

after(async () => {
    await browser?.close();
    for (const server of servers) await server.close();
    await rm(dir, { recursive: true, force: true });
});

/** Opens `file` and returns what the page did besides loading itself. */
async function open(file: string) {
    assert.ok(browser);
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const errors: string[] = [];
    const requests: string[] = [];
    page.on("console", (message) => {
        if (message.type() === "error") errors.push(message.text());
    });
    page.on("pageerror", (error) => errors.push(error.message));
    page.on("request", (request) => requests.push(request.url()));
    const url = pathToFileURL(file).href;
    await page.goto(url, { waitUntil: "load" });
    return { page, errors, outsideRequests: () => requests.filter((r) => r !== url) };
}

test("a single server's report draws its four plots with the right bar counts", async () => {
    const { page, errors, outsideRequests } = await open(path.join(dir, "out", "base", "report.html"));
    try {
        const summary = JSON.parse(await readFile(path.join(dir, "out", "base", "summary.json"), "utf8")) as {
            latency_histogram_ms: { counts: number[] };
        };
        const bars = async (plot: string): Promise<number> => page.locator(`svg[data-plot="${plot}"] rect.bar`).count();
        assert.equal(await bars("acceptance-histogram"), draftLength + 1);
        assert.equal(await bars("per-position-acceptance"), draftLength);
        assert.equal(await bars("tau-by-category"), 4); // chat, code, math, uncategorized
        assert.equal(await bars("latency-distribution"), summary.latency_histogram_ms.counts.length);
        assert.ok(summary.latency_histogram_ms.counts.length > 1);
        for (const plot of [
            "acceptance-histogram",
            "per-position-acceptance",
            "tau-by-category",
            "latency-distribution",
        ]) {
            const box = await page.locator(`svg[data-plot="${plot}"]`).boundingBox();
            assert.ok(box && box.width > 300 && box.height > 200, `${plot} is laid out on the page`);
            const tallest = await page
                .locator(`svg[data-plot="${plot}"] rect.bar`)
                .evaluateAll((rects) => Math.max(...rects.map((r) => r.getBoundingClientRect().height)));
            assert.ok(tallest > 20, `${plot} has a visible bar (tallest ${tallest}px)`);
        }
        const categories = await page
            .locator('svg[data-plot="tau-by-category"] rect.bar')
            .evaluateAll((rects) => rects.map((r) => r.getAttribute("data-label")));
        assert.deepEqual(categories, ["chat (1)", "code (2)", "math (1)", "uncategorized (1)"]);
        assert.deepEqual(errors, []);
        assert.deepEqual(outsideRequests(), []);
    } finally {
        await page.close();
    }
});

test("the comparison report shows both servers side by side and looks right in a screenshot", async () => {
    const { page, errors, outsideRequests } = await open(path.join(dir, "out", "report.html"));
    try {
        assert.equal(await page.locator('svg[data-plot="tau-by-server"] rect.bar').count(), 2);
        assert.deepEqual(
            await page
                .locator("section.server")
                .evaluateAll((sections) => sections.map((s) => s.getAttribute("data-server"))),
            ["base", "distilled"],
        );
        assert.equal(await page.locator('svg[data-plot="acceptance-histogram"]').count(), 2);
        const headers = await page.locator("section.comparison th").allTextContents();
        assert.deepEqual(headers.slice(1), ["base", "distilled"]);
        const screenshot = process.env.REPORT_SCREENSHOT ?? path.join(dir, "report.png");
        await page.screenshot({ path: screenshot, fullPage: true });
        assert.ok((await stat(screenshot)).size > 10_000, "the screenshot has content");
        assert.deepEqual(errors, []);
        assert.deepEqual(outsideRequests(), []);
    } finally {
        await page.close();
    }
});
