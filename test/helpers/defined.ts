// An element a test knows is there (noUncheckedIndexedAccess types it `T | undefined`): asserted, then typed as present.
import assert from "node:assert/strict";

/** `value`, asserted to be present; `what` names it in the failure. */
export function defined<T>(value: T | undefined, what: string): T {
    assert.ok(value !== undefined, `${what} is missing`);
    return value;
}
