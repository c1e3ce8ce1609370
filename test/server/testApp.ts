/** Builds the app around a FakeEngine (already loaded) for in-process tests. */

import { defaultDraftLength } from "../../src/engine/engineDefaults.js";
import { type App, type AppOptions, buildApp } from "../../src/server/buildApp.js";
import { ServerMetrics } from "../../src/server/ServerMetrics.js";
import { defaultBodyLimit } from "../../src/server/serveDefaults.js";
import { FakeEngine, type FakeEngineOptions } from "./FakeEngine.js";

export interface TestApp extends App {
    engine: FakeEngine;
}

/** What serve's command hands buildApp when no flag is given. */
export const serveAppDefaults = { draftLength: defaultDraftLength, bodyLimit: defaultBodyLimit } as const;

export function buildTestApp(engineOptions: FakeEngineOptions = {}, appOptions: Partial<AppOptions> = {}): TestApp {
    const metrics = appOptions.metrics ?? new ServerMetrics();
    const engine = new FakeEngine({ observer: metrics.engineObserver, ...engineOptions });
    const built = buildApp({ ...serveAppDefaults, ...appOptions, metrics });
    built.slot.fill(engine);
    return { ...built, engine };
}
