/** Builds the app around a FakeEngine (already loaded) for in-process tests. */

import { type App, type AppOptions, buildApp } from "../../src/server/buildApp.js";
import { ServerMetrics } from "../../src/server/ServerMetrics.js";
import { FakeEngine, type FakeEngineOptions } from "./FakeEngine.js";

export interface TestApp extends App {
    engine: FakeEngine;
}

export function buildTestApp(engineOptions: FakeEngineOptions = {}, appOptions: AppOptions = {}): TestApp {
    const metrics = appOptions.metrics ?? new ServerMetrics();
    const engine = new FakeEngine({ observer: metrics.engineObserver, ...engineOptions });
    const built = buildApp({ ...appOptions, metrics });
    built.slot.fill(engine);
    return { ...built, engine };
}
