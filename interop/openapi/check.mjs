// Validates agentd's OpenAPI document with @seriousme/openapi-schema-validator (the OpenAPI Initiative's
// JSON schemas for 3.0/3.1/3.2, through ajv). Run by TestInteropOpenAPIValidator (api_openapi_test.go)
// with AGENTD_URL set, on the npm Node 22 binary: it fetches GET /openapi.json from a live server,
// validates it, and checks that every $ref resolves.
import assert from "node:assert/strict";
import { Validator } from "@seriousme/openapi-schema-validator";

const res = await fetch(process.env.AGENTD_URL + "/openapi.json");
assert.equal(res.status, 200);
const doc = await res.json();

const validator = new Validator();
const out = await validator.validate(doc);
if (!out.valid) {
  console.error(JSON.stringify(out.errors, null, 2));
  process.exit(1);
}
assert.equal(validator.version, "3.1");
validator.resolveRefs(); // throws on a $ref that points nowhere
const ops = Object.values(doc.paths).flatMap((p) => Object.keys(p).filter((k) => k !== "parameters")).length;
console.log(`openapi interop: ok (OpenAPI ${validator.version}, ${Object.keys(doc.paths).length} paths, ${ops} operations)`);
