/**
 * Defaults and limits that are serve's own (address, port, body and draft-length limits, Retry-After, the embedded
 * model), shared by the CLI, the app and the docs. The engine's defaults (streams, context size, queue, backend,
 * lookahead) and the draft length are src/engine/engineDefaults.ts's: import them from there.
 */

/** Address to listen on: loopback unless asked otherwise. */
export const defaultHost = "127.0.0.1";
/** Port to listen on (serve.sh of a packed folder falls back to it when $PORT is unset). */
export const defaultPort = 8000;
/** Largest draft a request may ask for. */
export const maxDraftLength = 64;
/** Largest request body in bytes: 1 MiB holds ~130k token ids. */
export const defaultBodyLimit = 1024 * 1024;
/**
 * How long a client may go on sending a body refused with 413 before its connection is closed: the rest is read and
 * discarded meanwhile (nginx's lingering close has the same bound, `lingering_time`, 30 s).
 */
export const refusedBodyLingerMs = 30_000;
/** Seconds a client is told to wait (Retry-After) after queue_full or model_loading. */
export const retryAfterSeconds = 1;
/** The model served when `--model` is not given, relative to the package root. */
export const defaultModelFile = "models/specdraft-default.gguf";
