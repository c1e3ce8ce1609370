/** Reading a Prometheus scrape in tests: a missing metric fails the test instead of reading as 0. */
import assert from "node:assert/strict";

/** The sample line `name{labels} value` of a scrape, if there is one. */
function sampleLine(text: string, name: string, labels: string): string | undefined {
    return text.split("\n").find((l) => l.startsWith(`${name}${labels} `));
}

/** The value of one sample line; a missing line fails the test, so a metric that vanished cannot pass as 0. */
export function sample(text: string, name: string, labels = ""): number {
    const line = sampleLine(text, name, labels);
    assert.ok(line !== undefined, `no sample ${name}${labels} in the scrape:\n${text}`);
    return Number(line.split(" ").at(-1));
}

/**
 * Asserts that the metric is exported (its `# TYPE` line) but has no series with these labels yet: prom-client writes a
 * labelled series only after its first observation.
 */
export function assertNoSeriesYet(text: string, name: string, labels: string): void {
    assert.match(text, new RegExp(`^# TYPE ${name} `, "m"), `${name} is not exported`);
    assert.equal(sampleLine(text, name, labels), undefined, `${name}${labels} exists already`);
}
