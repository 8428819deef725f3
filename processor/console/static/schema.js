// JSON Schema validation of the keywords the offsets document's schema uses (draft
// 2020-12), so an edit is checked as it is typed. The API checks it again on write;
// tests hold this to the API's validator (jsonschema) on the same documents.

function typeOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

function hasType(value, type) {
  const actual = typeOf(value);
  return actual === type || (type === "number" && actual === "integer");
}

function equal(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

function resolve(root, ref) {
  if (!ref.startsWith("#/")) throw new Error(`cannot follow ${ref}`);
  return ref.slice(2).split("/").reduce((node, part) => node[part.replace(/~1/g, "/").replace(/~0/g, "~")], root);
}

function show(value) {
  return JSON.stringify(value);
}

// The first error of value against schema, as "<JSON pointer>: <why>", or null.
export function schemaError(root, schema, value, path = "") {
  const at = (why) => `${path || "/"}: ${why}`;
  if (schema === true || schema === undefined) return null;
  if (schema === false) return at("not allowed");
  if (schema.$ref) {
    const found = schemaError(root, resolve(root, schema.$ref), value, path);
    if (found) return found;
  }
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => hasType(value, t))) return at(`${show(value)} is not of type ${types.map(show).join(", ")}`);
  }
  if ("const" in schema && !equal(schema.const, value)) return at(`${show(schema.const)} was expected`);
  if (schema.enum && !schema.enum.some((e) => equal(e, value))) return at(`${show(value)} is not one of ${show(schema.enum)}`);
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) return at(`${value} is less than the minimum of ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) return at(`${value} is greater than the maximum of ${schema.maximum}`);
  }
  if (typeof value === "string") {
    const length = [...value].length;
    if (schema.minLength !== undefined && length < schema.minLength) return at(`${show(value)} is too short`);
    if (schema.maxLength !== undefined && length > schema.maxLength) return at(`${show(value)} is too long`);
    if (schema.pattern !== undefined && !new RegExp(schema.pattern, "u").test(value)) return at(`${show(value)} does not match ${show(schema.pattern)}`);
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) return at("should be non-empty");
    if (schema.maxItems !== undefined && value.length > schema.maxItems) return at("is too long");
    if (schema.items !== undefined) {
      for (let i = 0; i < value.length; i++) {
        const found = schemaError(root, schema.items, value[i], `${path}/${i}`);
        if (found) return found;
      }
    }
  }
  if (typeOf(value) === "object") {
    const keys = Object.keys(value);
    for (const name of schema.required || []) {
      if (!(name in value)) return at(`${show(name)} is a required property`);
    }
    if (schema.minProperties !== undefined && keys.length < schema.minProperties) return at("does not have enough properties");
    if (schema.maxProperties !== undefined && keys.length > schema.maxProperties) return at("has too many properties");
    const properties = schema.properties || {};
    for (const name of keys) {
      const where = `${path}/${name.replace(/~/g, "~0").replace(/\//g, "~1")}`;
      if (name in properties) {
        const found = schemaError(root, properties[name], value[name], where);
        if (found) return found;
      } else if (schema.additionalProperties === false) {
        return at(`additional properties are not allowed (${show(name)} was unexpected)`);
      } else if (schema.additionalProperties !== undefined) {
        const found = schemaError(root, schema.additionalProperties, value[name], where);
        if (found) return found;
      }
    }
  }
  for (const part of schema.allOf || []) {
    const found = schemaError(root, part, value, path);
    if (found) return found;
  }
  if (schema.anyOf && !schema.anyOf.some((part) => !schemaError(root, part, value, path))) {
    return at(`${show(value)} is not valid under any of the given schemas`);
  }
  if (schema.oneOf) {
    const errors = schema.oneOf.map((part) => schemaError(root, part, value, path));
    const passed = errors.filter((e) => e === null).length;
    if (passed === 0) {
      // the deepest error of the alternatives says the most
      return errors.reduce((a, b) => (b.split(":")[0].length > a.split(":")[0].length ? b : a));
    }
    if (passed > 1) return at(`${show(value)} is valid under each of more than one of the given schemas`);
  }
  return null;
}
