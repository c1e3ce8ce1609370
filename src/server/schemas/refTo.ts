/** A `$ref` to a schema registered by `$id` (see sharedSchemas.ts), typed as the schema it points to. */

import { type Static, type TSchema, Type } from "@sinclair/typebox";

export function refTo<T extends TSchema>(schema: T) {
    if (schema.$id === undefined) throw new Error("refTo needs a schema with an $id");
    return Type.Unsafe<Static<T>>(Type.Ref(schema.$id));
}
