/** Defaults and limits of `specdraft serve`, shared by the CLI, the app and the docs. */

/** Address to listen on: loopback unless asked otherwise. */
export const defaultHost = "127.0.0.1";
export const defaultPort = 8000;
/** Tokens drafted per request when the request does not say. */
export const defaultDraftLength = 16;
/** Largest draft a request may ask for. */
export const maxDraftLength = 64;
/** Sequences (concurrent conversations) held at once. */
export const defaultStreams = 32;
/** Tokens one sequence can hold (prompt + draft). */
export const defaultContextSize = 4096;
/** Requests that may wait for a batch before new ones get 503 queue_full. */
export const defaultMaxQueue = 1024;
/** Largest request body in bytes: 1 MiB holds ~130k token ids. */
export const defaultBodyLimit = 1024 * 1024;
/** Seconds a client is told to wait (Retry-After) after queue_full or model_loading. */
export const retryAfterSeconds = 1;
/** The model served when `--model` is not given, relative to the package root. */
export const defaultModelFile = "models/specdraft-default.gguf";
