/** ServeOptions for tests of the serve process: a small, CPU-only server on a free loopback port. */
import type { ServeOptions } from "../../src/server/startServer.js";

export function testServeOptions(modelPath: string, overrides: Partial<ServeOptions> = {}): ServeOptions {
    return {
        modelPath,
        host: "127.0.0.1",
        port: 0,
        draftLength: 4,
        streams: 4,
        contextSize: 256,
        gpu: "cpu",
        maxQueue: 16,
        bodyLimit: 1024 * 1024,
        logRequests: false,
        ...overrides,
    };
}
