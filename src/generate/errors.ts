/** Errors of `specdraft generate`, each with a stable code; the command prints the message and exits ≠ 0. */

export type GenerateErrorCode =
    /** The drafter's vocabulary differs from the target's, so its token ids would mean other text. */
    | "vocab_mismatch"
    /** Speculative output differs from the target alone: speculation was not lossless. */
    | "output_mismatch"
    /** A prompt, data file or option cannot be used. */
    | "bad_input";

export class GenerateError extends Error {
    readonly code: GenerateErrorCode;

    constructor(code: GenerateErrorCode, message: string) {
        super(message);
        this.name = "GenerateError";
        this.code = code;
    }
}
