/** GET /metrics: Prometheus text whose counters move with requests and engine events; one registry per app. */

import assert from "node:assert/strict";
import { test } from "node:test";
import { assertNoSeriesYet, sample } from "../helpers/metricSamples.js";
import { buildTestApp } from "./testApp.js";

test("request, latency, decode, prefix and queue metrics move", async () => {
    const { app } = buildTestApp();
    try {
        const scrape = async () => {
            const res = await app.inject({ method: "GET", url: "/metrics" });
            assert.equal(res.statusCode, 200);
            assert.match(res.headers["content-type"] as string, /^text\/plain/);
            return res.body;
        };
        const before = await scrape();
        const ok200 = '{route="/draft",method="POST",status="200"}';
        const bad400 = '{route="/draft",method="POST",status="400"}';
        assertNoSeriesYet(before, "specdraft_http_requests_total", ok200);

        const context = [1, 2, 3, 4, 5, 6, 7, 8];
        await app.inject({ method: "POST", url: "/draft", payload: { tokens: context, n: 4 } });
        await app.inject({ method: "POST", url: "/draft", payload: { tokens: [...context, 9, 10], n: 4 } });
        await app.inject({ method: "POST", url: "/draft", payload: { tokens: [], n: 4 } });
        await app.inject({ method: "GET", url: "/nowhere" });
        const after = await scrape();

        assert.equal(sample(after, "specdraft_http_requests_total", ok200), 2);
        assert.equal(sample(after, "specdraft_http_requests_total", bad400), 1);
        assert.equal(
            sample(after, "specdraft_http_requests_total", '{route="unmatched",method="GET",status="404"}'),
            1,
        );
        assert.equal(sample(after, "specdraft_http_request_duration_seconds_count", '{route="/draft"}'), 3);
        // the second context extends the first: its first 8 tokens come from the (fake) cache
        assert.equal(sample(after, "specdraft_prefix_tokens_evaluated_total"), 8 + 2);
        assert.equal(sample(after, "specdraft_prefix_tokens_reused_total"), 8);
        assert.equal(sample(after, "specdraft_decode_batch_sequences_count"), 8);
        assert.equal(sample(after, "specdraft_decode_tokens_total"), 8);
        assert.equal(sample(after, "specdraft_queue_depth"), 0);
    } finally {
        await app.close();
    }
});

test("two apps do not share counters", async () => {
    const a = buildTestApp();
    const b = buildTestApp();
    try {
        await a.app.inject({ method: "POST", url: "/draft", payload: { tokens: [1], n: 1 } });
        const text = (await b.app.inject({ method: "GET", url: "/metrics" })).body;
        assertNoSeriesYet(text, "specdraft_http_requests_total", '{route="/draft",method="POST",status="200"}');
    } finally {
        await a.app.close();
        await b.app.close();
    }
});
