//! The JSON-Schema compiler: a Draft 2020-12 schema into the closed-set leaves the model is
//! asked and the shape their answers are assembled into.
//!
//! What compiles is what has a finite set of values the model can choose among: `enum`,
//! `const`, `boolean`, `null`, bounded `integer` intervals, unions of these (`anyOf`, `oneOf`,
//! a `type` list), and closed, fully-required objects and fixed-length tuples of them, nested.
//! A leaf with one possible value is built directly, without a model call. Everything else
//! (free text, open numbers, optional fields, open objects or arrays, `$ref`, joint
//! constraints over objects) is refused before any model work with the JSON pointer of the
//! part and why, so the caller learns what to change instead of getting a guess.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::frontends::json as j;
use crate::frontends::leaf::Values;

/// The Draft 2020-12 metaschema URI (`$schema`), the only draft compiled.
pub const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Keywords that only annotate (ignored by the compiler; `description` and `title` are shown
/// to the model with their field).
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "$defs",
    "$anchor",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Keywords that narrow a listed value (allowed beside `enum`/`const`, which are checked
/// against them).
const VALUE_CHECKS: &[&str] = &[
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];

/// What the compiler may build, each a setting named in its error.
#[derive(Debug, Clone)]
pub struct SchemaLimits {
    /// Most leaves asked of the model (`--schema-max-fields`).
    pub max_fields: usize,
    /// Most candidates of one leaf (`--max-options`, the server's option limit).
    pub max_candidates: usize,
    /// Most nested objects and tuples (`--schema-max-depth`).
    pub max_depth: usize,
}

/// A schema compiled: the leaves to ask, and how their answers make the whole value.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub shape: Shape,
    pub leaves: Vec<SchemaLeaf>,
}

/// One leaf the model is asked.
#[derive(Debug, Clone)]
pub struct SchemaLeaf {
    /// JSON pointer of the leaf in the answer value (`/customer/priority`; `""` for the root).
    pub pointer: String,
    /// JSON pointer of the leaf's schema (`/properties/customer/properties/priority`).
    pub schema_pointer: String,
    /// The leaf's path as the model is shown it (`customer.priority`, `scores[1]`; empty for
    /// the root).
    pub path: String,
    /// The schema's `description` (else `title`) of the leaf, shown with it.
    pub description: Option<String>,
    pub values: Values,
}

/// How an answer value is assembled.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// The value the model chose for leaf `i` of [`Compiled::leaves`].
    Leaf(usize),
    /// A value the schema fixes (`const`, `null`, a one-value `enum`): no model call.
    Fixed(Value),
    /// A closed object: every property, in schema order.
    Object(Vec<(String, Shape)>),
    /// A fixed-length array (`prefixItems` with `items: false`).
    Tuple(Vec<Shape>),
}

/// Why a schema does not compile: the JSON pointer of the part (in the schema) and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaError {
    pub pointer: String,
    pub message: String,
}

impl Shape {
    /// The value, given each leaf's chosen value.
    pub fn assemble(&self, chosen: &[Value]) -> Value {
        match self {
            Shape::Leaf(i) => chosen[*i].clone(),
            Shape::Fixed(value) => value.clone(),
            Shape::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(name, shape)| (name.clone(), shape.assemble(chosen)))
                    .collect(),
            ),
            Shape::Tuple(items) => {
                Value::Array(items.iter().map(|shape| shape.assemble(chosen)).collect())
            }
        }
    }

    /// Every value the schema fixes, with its pointer in the answer value, in order.
    pub fn fixed(&self) -> Vec<(String, Value)> {
        fn walk(shape: &Shape, pointer: &str, out: &mut Vec<(String, Value)>) {
            match shape {
                Shape::Leaf(_) => {}
                Shape::Fixed(value) => out.push((pointer.to_string(), value.clone())),
                Shape::Object(fields) => {
                    for (name, shape) in fields {
                        walk(shape, &format!("{pointer}/{}", escape(name)), out);
                    }
                }
                Shape::Tuple(items) => {
                    for (i, shape) in items.iter().enumerate() {
                        walk(shape, &format!("{pointer}/{i}"), out);
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(self, "", &mut out);
        out
    }
}

/// Compiles a schema within `limits`.
pub fn compile(schema: &Value, limits: &SchemaLimits) -> Result<Compiled, SchemaError> {
    if let Some(Value::String(uri)) = schema.get("$schema") {
        if uri.trim_end_matches('#') != DRAFT_2020_12 {
            return Err(error(
                "/$schema",
                format!("only Draft 2020-12 is supported ({DRAFT_2020_12}), got {uri:?}"),
            ));
        }
    }
    let mut compiler = Compiler {
        limits,
        leaves: Vec::new(),
    };
    let at = Place {
        schema: String::new(),
        value: String::new(),
        path: String::new(),
        depth: 0,
    };
    let shape = compiler.node(schema, &at)?;
    Ok(Compiled {
        shape,
        leaves: compiler.leaves,
    })
}

/// Escapes a property name for a JSON pointer (RFC 6901).
pub fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// Splits a JSON pointer into its unescaped segments.
pub fn segments(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

fn error(pointer: impl Into<String>, message: impl Into<String>) -> SchemaError {
    SchemaError {
        pointer: pointer.into(),
        message: message.into(),
    }
}

/// Where the compiler is: in the schema, in the answer value, in the model's words.
struct Place {
    schema: String,
    value: String,
    path: String,
    /// Objects and tuples around this node.
    depth: usize,
}

impl Place {
    fn keyword(&self, keyword: &str) -> String {
        format!("{}/{}", self.schema, escape(keyword))
    }

    fn property(&self, name: &str) -> Place {
        Place {
            schema: format!("{}/properties/{}", self.schema, escape(name)),
            value: format!("{}/{}", self.value, escape(name)),
            path: if self.path.is_empty() {
                name.to_string()
            } else {
                format!("{}.{name}", self.path)
            },
            depth: self.depth + 1,
        }
    }

    fn item(&self, index: usize) -> Place {
        Place {
            schema: format!("{}/prefixItems/{index}", self.schema),
            value: format!("{}/{index}", self.value),
            path: format!("{}[{index}]", self.path),
            depth: self.depth + 1,
        }
    }

    fn branch(&self, keyword: &str, index: usize) -> Place {
        Place {
            schema: format!("{}/{keyword}/{index}", self.schema),
            value: self.value.clone(),
            path: self.path.clone(),
            depth: self.depth,
        }
    }
}

struct Compiler<'a> {
    limits: &'a SchemaLimits,
    leaves: Vec<SchemaLeaf>,
}

impl Compiler<'_> {
    fn node(&mut self, schema: &Value, at: &Place) -> Result<Shape, SchemaError> {
        let map = object_schema(schema, at)?;
        check_keywords(map, at)?;
        let types = types(map, at)?;
        let structured = map.contains_key("properties")
            || map.contains_key("prefixItems")
            || types.iter().any(|t| t == "object" || t == "array");
        let finite = ["enum", "const", "anyOf", "oneOf"]
            .iter()
            .any(|k| map.contains_key(*k));
        if structured && !finite {
            if types.len() > 1 {
                return Err(error(
                    at.keyword("type"),
                    "a type list with `object` or `array` is a joint constraint: give one type",
                ));
            }
            if at.depth >= self.limits.max_depth {
                return Err(error(
                    at.schema.clone(),
                    format!(
                        "nesting deeper than {} objects and tuples (setting --schema-max-depth / DECIDE_SCHEMA_MAX_DEPTH)",
                        self.limits.max_depth
                    ),
                ));
            }
            let tuple = types.first().map(String::as_str) == Some("array")
                || map.contains_key("prefixItems");
            // The answer is built as the shape's kind, so a `type` naming another kind (an
            // object given `prefixItems`, a string given `properties`) admits no answer.
            let kind = if tuple { "array" } else { "object" };
            if let Some(other) = types.first().filter(|t| *t != kind) {
                return Err(error(
                    at.keyword("type"),
                    format!(
                        "type {other:?} does not fit `{}`: a closed object has type \"object\" and `properties`, a tuple type \"array\" and `prefixItems`",
                        if tuple { "prefixItems" } else { "properties" }
                    ),
                ));
            }
            return if tuple {
                self.tuple(map, at)
            } else {
                self.object(map, at)
            };
        }
        let values = self.values(schema, at)?;
        if values.len() == 1 {
            return Ok(Shape::Fixed(values.into_iter().next().expect("one value")));
        }
        if self.leaves.len() == self.limits.max_fields {
            return Err(error(
                at.schema.clone(),
                format!(
                    "more than {} fields for the model to decide (setting --schema-max-fields / DECIDE_SCHEMA_MAX_FIELDS)",
                    self.limits.max_fields
                ),
            ));
        }
        let is_boolean = values.len() == 2
            && values.contains(&Value::Bool(true))
            && values.contains(&Value::Bool(false));
        let description = ["description", "title"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str))
            .map(str::to_string);
        self.leaves.push(SchemaLeaf {
            pointer: at.value.clone(),
            schema_pointer: at.schema.clone(),
            path: at.path.clone(),
            description,
            values: if is_boolean {
                Values::Boolean
            } else {
                Values::Listed(values)
            },
        });
        Ok(Shape::Leaf(self.leaves.len() - 1))
    }

    fn object(&mut self, map: &Map<String, Value>, at: &Place) -> Result<Shape, SchemaError> {
        let closed = |k: &str| map.get(k) == Some(&Value::Bool(false));
        if !closed("additionalProperties") && !closed("unevaluatedProperties") {
            return Err(error(
                at.keyword("additionalProperties"),
                "open objects are not supported: set \"additionalProperties\": false so the answer has exactly the listed properties",
            ));
        }
        let empty = Map::new();
        let properties = match map.get("properties") {
            None => &empty,
            Some(Value::Object(properties)) => properties,
            Some(other) => {
                return Err(error(
                    at.keyword("properties"),
                    format!("expected an object, got {}", j::type_name(other)),
                ))
            }
        };
        let required: Vec<&str> = match map.get("required") {
            None => Vec::new(),
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            Some(other) => {
                return Err(error(
                    at.keyword("required"),
                    format!("expected an array of names, got {}", j::type_name(other)),
                ))
            }
        };
        if let Some(name) = properties.keys().find(|n| !required.contains(&n.as_str())) {
            return Err(error(
                at.keyword("required"),
                format!("optional fields are not supported: list \"{name}\" in required (every property is decided)"),
            ));
        }
        if let Some(name) = required.iter().find(|n| !properties.contains_key(**n)) {
            return Err(error(
                at.keyword("required"),
                format!("\"{name}\" is required but is not a property, and the object is closed: no value satisfies it"),
            ));
        }
        let mut fields = Vec::with_capacity(properties.len());
        for (name, schema) in properties {
            fields.push((name.clone(), self.node(schema, &at.property(name))?));
        }
        Ok(Shape::Object(fields))
    }

    fn tuple(&mut self, map: &Map<String, Value>, at: &Place) -> Result<Shape, SchemaError> {
        let open = || {
            error(
                at.schema.clone(),
                "arrays of open length are not supported: give \"prefixItems\" with \"items\": false and \"minItems\" equal to their number",
            )
        };
        let Some(Value::Array(items)) = map.get("prefixItems") else {
            return Err(open());
        };
        let min = map.get("minItems").and_then(Value::as_u64);
        if map.get("items") != Some(&Value::Bool(false)) || min != Some(items.len() as u64) {
            return Err(open());
        }
        if let Some(max) = map.get("maxItems").and_then(Value::as_f64) {
            if max < items.len() as f64 {
                return Err(error(
                    at.keyword("maxItems"),
                    format!(
                        "{max} is below the tuple's {} items: no value satisfies it",
                        items.len()
                    ),
                ));
            }
        }
        let mut shapes = Vec::with_capacity(items.len());
        for (i, schema) in items.iter().enumerate() {
            shapes.push(self.node(schema, &at.item(i))?);
        }
        Ok(Shape::Tuple(shapes))
    }

    /// The distinct values a finite node admits, in the order given, each checked against
    /// the node's own constraints.
    fn values(&mut self, schema: &Value, at: &Place) -> Result<Vec<Value>, SchemaError> {
        let map = object_schema(schema, at)?;
        let (candidates, listed) = if let Some(value) = map.get("const") {
            (vec![value.clone()], Some("const"))
        } else if let Some(values) = map.get("enum") {
            let Value::Array(values) = values else {
                return Err(error(at.keyword("enum"), "expected an array of values"));
            };
            (values.clone(), Some("enum"))
        } else if let Some((keyword, branches)) = ["anyOf", "oneOf"]
            .iter()
            .find_map(|k| map.get(*k).map(|b| (*k, b)))
        {
            (self.union(keyword, branches, at)?, None)
        } else {
            (typed_values(map, at, self.limits)?, None)
        };
        // Each with its place in the list, so that a refusal points at the value itself.
        let mut seen = HashSet::new();
        let distinct: Vec<(usize, Value)> = candidates
            .into_iter()
            .enumerate()
            .filter(|(_, v)| seen.insert(j::compact(&canonical(v))))
            .collect();
        let validator = jsonschema::draft202012::new(schema).map_err(|e| {
            error(
                at.schema.clone(),
                format!("not a valid Draft 2020-12 schema: {e}"),
            )
        })?;
        let mut admitted = Vec::with_capacity(distinct.len());
        for (i, value) in distinct {
            match (validator.validate(&value), listed) {
                (Ok(()), _) => admitted.push(value),
                // A listed value the node's own constraints refuse: the schema contradicts itself.
                (Err(why), Some(keyword)) => {
                    let pointer = if keyword == "enum" {
                        format!("{}/{i}", at.keyword("enum"))
                    } else {
                        at.keyword("const")
                    };
                    return Err(error(
                        pointer,
                        format!(
                            "{} is not admitted by its own schema: {why}",
                            j::compact(&value)
                        ),
                    ));
                }
                // A union's value that its combination refuses (`oneOf` overlaps) is dropped.
                (Err(_), None) => {}
            }
        }
        if admitted.is_empty() {
            return Err(error(at.schema.clone(), "no value satisfies this schema"));
        }
        if admitted.len() > self.limits.max_candidates {
            return Err(error(
                at.schema.clone(),
                format!(
                    "{} candidates exceed the limit of {} per field (setting --max-options / DECIDE_MAX_OPTIONS)",
                    admitted.len(),
                    self.limits.max_candidates
                ),
            ));
        }
        Ok(admitted)
    }

    fn union(
        &mut self,
        keyword: &str,
        branches: &Value,
        at: &Place,
    ) -> Result<Vec<Value>, SchemaError> {
        let Value::Array(branches) = branches else {
            return Err(error(at.keyword(keyword), "expected an array of schemas"));
        };
        let mut all = Vec::new();
        for (i, branch) in branches.iter().enumerate() {
            let place = at.branch(keyword, i);
            let map = object_schema(branch, &place)?;
            check_keywords(map, &place)?;
            let structured = map.contains_key("properties")
                || map.contains_key("prefixItems")
                || types(map, &place)?
                    .iter()
                    .any(|t| t == "object" || t == "array");
            if structured && !map.contains_key("enum") && !map.contains_key("const") {
                return Err(error(
                    place.schema,
                    format!("{keyword} over objects or arrays is a joint constraint, which is not supported: decide each field on its own"),
                ));
            }
            all.extend(self.values(branch, &place)?);
        }
        Ok(all)
    }
}

/// A JSON value with its numbers normalised (`1.0` == `1`), for collapsing repeats.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Value::from(x as i64),
            _ => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        Value::Object(map) => {
            let mut sorted: Vec<(&String, &Value)> = map.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                sorted
                    .into_iter()
                    .map(|(k, v)| (k.clone(), canonical(v)))
                    .collect(),
            )
        }
        other => other.clone(),
    }
}

fn object_schema<'a>(schema: &'a Value, at: &Place) -> Result<&'a Map<String, Value>, SchemaError> {
    match schema {
        Value::Object(map) => Ok(map),
        Value::Bool(true) => Err(error(
            at.schema.clone(),
            "the schema `true` admits any value: give an enum, a boolean, a bounded integer or a closed object",
        )),
        Value::Bool(false) => Err(error(at.schema.clone(), "the schema `false` admits no value")),
        other => Err(error(
            at.schema.clone(),
            format!("a schema must be an object or a boolean, got {}", j::type_name(other)),
        )),
    }
}

/// Refuses the keywords the compiler does not understand, each with why.
fn check_keywords(map: &Map<String, Value>, at: &Place) -> Result<(), SchemaError> {
    const UNDERSTOOD: &[&str] = &[
        "type",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "properties",
        "required",
        "additionalProperties",
        "unevaluatedProperties",
        "prefixItems",
        "items",
        "minItems",
        "maxItems",
    ];
    for keyword in map.keys() {
        let k = keyword.as_str();
        if ANNOTATIONS.contains(&k) || UNDERSTOOD.contains(&k) || VALUE_CHECKS.contains(&k) {
            continue;
        }
        let why = match k {
            "$ref" | "$dynamicRef" | "$recursiveRef" => {
                "references are not supported: inline the referenced schema"
            }
            "allOf" | "not" | "if" | "then" | "else" | "dependentSchemas" | "dependentRequired" => {
                "joint constraints are not supported: each field is decided on its own"
            }
            "patternProperties" | "propertyNames" | "minProperties" | "maxProperties" => {
                "objects with open or counted properties are not supported: list every property"
            }
            "contains" | "minContains" | "maxContains" | "uniqueItems" | "unevaluatedItems" => {
                "arrays are supported only as fixed-length tuples (prefixItems, items: false)"
            }
            _ => "this keyword is not supported",
        };
        return Err(error(at.keyword(k), format!("`{k}`: {why}")));
    }
    Ok(())
}

/// The node's `type` as a list (empty when it has none).
fn types(map: &Map<String, Value>, at: &Place) -> Result<Vec<String>, SchemaError> {
    match map.get("type") {
        None => Ok(Vec::new()),
        Some(Value::String(t)) => Ok(vec![t.clone()]),
        Some(Value::Array(list)) => list
            .iter()
            .map(|t| {
                t.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| error(at.keyword("type"), "expected type names"))
            })
            .collect(),
        Some(other) => Err(error(
            at.keyword("type"),
            format!(
                "expected a type name or a list of them, got {}",
                j::type_name(other)
            ),
        )),
    }
}

/// The values of a node known only by its `type`: `boolean`, `null`, a bounded `integer`.
fn typed_values(
    map: &Map<String, Value>,
    at: &Place,
    limits: &SchemaLimits,
) -> Result<Vec<Value>, SchemaError> {
    let types = types(map, at)?;
    if types.is_empty() {
        return Err(error(
            at.schema.clone(),
            "a schema without `type`, `enum` or `const` admits any value: say which values the field may take",
        ));
    }
    let mut values = Vec::new();
    for t in &types {
        match t.as_str() {
            "boolean" => values.extend([Value::Bool(true), Value::Bool(false)]),
            "null" => values.push(Value::Null),
            "integer" => values.extend(integers(map, at, limits)?),
            "string" => {
                return Err(error(
                    at.keyword("type"),
                    "free text is not supported: list the values with `enum`",
                ))
            }
            "number" => {
                return Err(error(
                    at.keyword("type"),
                    "open numbers are not supported: use `enum`, or an `integer` with `minimum` and `maximum`",
                ))
            }
            "object" | "array" => {
                return Err(error(
                    at.keyword("type"),
                    "a type list with `object` or `array` is a joint constraint: give one type",
                ))
            }
            other => return Err(error(at.keyword("type"), format!("unknown type {other:?}"))),
        }
    }
    Ok(values)
}

/// The integers of a bounded interval (`minimum`/`exclusiveMinimum` and
/// `maximum`/`exclusiveMaximum`, optionally `multipleOf`), within the candidate limit.
fn integers(
    map: &Map<String, Value>,
    at: &Place,
    limits: &SchemaLimits,
) -> Result<Vec<Value>, SchemaError> {
    let bound = |keyword: &str| -> Result<Option<f64>, SchemaError> {
        match map.get(keyword) {
            None => Ok(None),
            Some(value) => value
                .as_f64()
                .map(Some)
                .ok_or_else(|| error(at.keyword(keyword), "expected a number")),
        }
    };
    let low = match (bound("minimum")?, bound("exclusiveMinimum")?) {
        (Some(a), Some(b)) => Some(a.ceil().max(b.floor() + 1.0)),
        (Some(a), None) => Some(a.ceil()),
        (None, Some(b)) => Some(b.floor() + 1.0),
        (None, None) => None,
    };
    let high = match (bound("maximum")?, bound("exclusiveMaximum")?) {
        (Some(a), Some(b)) => Some(a.floor().min(b.ceil() - 1.0)),
        (Some(a), None) => Some(a.floor()),
        (None, Some(b)) => Some(b.ceil() - 1.0),
        (None, None) => None,
    };
    let (Some(low), Some(high)) = (low, high) else {
        return Err(error(
            at.schema.clone(),
            "an integer needs both `minimum` and `maximum`: open numbers are not supported",
        ));
    };
    // Beyond 2^53 an f64 does not hold every integer (1e17 + 1.0 == 1e17), so the interval
    // could not be walked one integer at a time, nor its values written exactly.
    if low.abs() > EXACT_INTEGERS || high.abs() > EXACT_INTEGERS {
        return Err(error(
            at.schema.clone(),
            format!("the interval [{low}, {high}] reaches beyond ±2^53, where integers are not exact: list the values with `enum`"),
        ));
    }
    let step = bound("multipleOf")?;
    if step.is_some_and(|s| s <= 0.0) {
        return Err(error(at.keyword("multipleOf"), "must be greater than 0"));
    }
    let count = if high < low { 0.0 } else { high - low + 1.0 };
    // Only intervals whose every integer could be a candidate are walked (a step can only
    // shorten the list; the limit is checked again on what is admitted).
    if step.is_none() && count > limits.max_candidates as f64 {
        return Err(error(
            at.schema.clone(),
            format!(
                "the interval [{low}, {high}] has {count} integers, over the limit of {} candidates per field (setting --max-options / DECIDE_MAX_OPTIONS)",
                limits.max_candidates
            ),
        ));
    }
    if count > 1.0e6 {
        return Err(error(
            at.schema.clone(),
            format!("the interval [{low}, {high}] is too wide to list its multiples; narrow it"),
        ));
    }
    let values = (low as i64..=high as i64)
        .filter(|&n| step.is_none_or(|s| (n as f64 / s).fract() == 0.0))
        .map(Value::from)
        .collect();
    Ok(values)
}

/// 2^53: every integer up to it in magnitude is an exact f64.
const EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits() -> SchemaLimits {
        SchemaLimits {
            max_fields: 64,
            max_candidates: 255,
            max_depth: 8,
        }
    }

    fn fails(schema: Value) -> SchemaError {
        compile(&schema, &limits()).expect_err("must not compile")
    }

    #[test]
    fn nested_closed_objects_compile_to_leaves_and_fixed_values() {
        let schema = json!({
            "type": "object", "additionalProperties": false,
            "required": ["urgent", "team", "severity", "kind", "meta"],
            "properties": {
                "urgent": {"type": "boolean", "description": "Must it be handled today?"},
                "team": {"enum": ["billing", "shipping", "billing", {"name": "x"}]},
                "severity": {"type": "integer", "minimum": 1, "maximum": 5},
                "kind": {"const": "ticket"},
                "meta": {"type": "object", "additionalProperties": false, "required": ["none", "pair"],
                         "properties": {"none": {"type": "null"},
                                        "pair": {"type": "array", "prefixItems": [{"type": "boolean"}, {"enum": [1, 2]}],
                                                 "items": false, "minItems": 2}}}
            }
        });
        let compiled = compile(&schema, &limits()).unwrap();
        let pointers: Vec<&str> = compiled.leaves.iter().map(|l| l.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/urgent",
                "/team",
                "/severity",
                "/meta/pair/0",
                "/meta/pair/1"
            ]
        );
        assert_eq!(compiled.leaves[0].values, Values::Boolean);
        assert_eq!(
            compiled.leaves[0].description.as_deref(),
            Some("Must it be handled today?")
        );
        // Repeated enum values collapse; objects are values chosen whole.
        assert_eq!(
            compiled.leaves[1].values,
            Values::Listed(vec![
                json!("billing"),
                json!("shipping"),
                json!({"name": "x"})
            ])
        );
        assert_eq!(
            compiled.leaves[2].values,
            Values::Listed((1..=5).map(Value::from).collect())
        );
        assert_eq!(compiled.leaves[3].path, "meta.pair[0]");
        let chosen = [
            json!(true),
            json!("shipping"),
            json!(3),
            json!(false),
            json!(2),
        ];
        let value = compiled.shape.assemble(&chosen);
        assert_eq!(
            value,
            json!({"urgent": true, "team": "shipping", "severity": 3, "kind": "ticket",
                   "meta": {"none": null, "pair": [false, 2]}})
        );
        assert!(jsonschema::is_valid(&schema, &value));
        assert_eq!(
            compiled.shape.fixed(),
            vec![
                ("/kind".to_string(), json!("ticket")),
                ("/meta/none".to_string(), json!(null))
            ]
        );
    }

    #[test]
    fn unions_of_finite_leaves_are_one_leaf() {
        let compiled = compile(
            &json!({"anyOf": [{"enum": ["a", "b"]}, {"type": "null"}, {"enum": ["a"]}]}),
            &limits(),
        )
        .unwrap();
        assert_eq!(
            compiled.leaves[0].values,
            Values::Listed(vec![json!("a"), json!("b"), json!(null)])
        );
        // oneOf drops what two branches share: such a value matches both, so none.
        let compiled = compile(
            &json!({"oneOf": [{"enum": ["a", "b"]}, {"enum": ["b", "c"]}]}),
            &limits(),
        )
        .unwrap();
        assert_eq!(
            compiled.leaves[0].values,
            Values::Listed(vec![json!("a"), json!("c")])
        );
        let compiled = compile(&json!({"type": ["boolean", "null"]}), &limits()).unwrap();
        assert_eq!(
            compiled.leaves[0].values,
            Values::Listed(vec![json!(true), json!(false), json!(null)])
        );
        // One possible value: fixed, no leaf.
        let compiled = compile(&json!({"enum": [7, 7.0]}), &limits()).unwrap();
        assert!(compiled.leaves.is_empty());
        assert_eq!(compiled.shape, Shape::Fixed(json!(7)));
    }

    #[test]
    fn intervals_respect_exclusive_bounds_and_steps() {
        let compiled = compile(
            &json!({"type": "integer", "exclusiveMinimum": 0, "maximum": 20, "multipleOf": 5}),
            &limits(),
        )
        .unwrap();
        assert_eq!(
            compiled.leaves[0].values,
            Values::Listed(vec![json!(5), json!(10), json!(15), json!(20)])
        );
    }

    #[test]
    fn unsupported_parts_are_named_by_pointer() {
        let closed = |props: Value| {
            let names: Vec<String> = props.as_object().unwrap().keys().cloned().collect();
            json!({"type": "object", "additionalProperties": false, "required": names, "properties": props})
        };
        let cases = [
            (
                closed(json!({"note": {"type": "string"}})),
                "/properties/note/type",
                "free text",
            ),
            (
                closed(json!({"n": {"type": "number"}})),
                "/properties/n/type",
                "open numbers",
            ),
            (
                closed(json!({"n": {"type": "integer", "minimum": 0}})),
                "/properties/n",
                "both `minimum` and `maximum`",
            ),
            (
                closed(json!({"n": {"type": "integer", "minimum": 0, "maximum": 1000}})),
                "/properties/n",
                "--max-options",
            ),
            (
                closed(json!({"r": {"$ref": "#/$defs/x"}})),
                "/properties/r/$ref",
                "references",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}),
                "/additionalProperties",
                "open objects",
            ),
            (
                json!({"type": "object", "additionalProperties": false, "properties": {"a": {"type": "boolean"}}}),
                "/required",
                "optional fields",
            ),
            (
                closed(json!({"l": {"type": "array", "items": {"type": "boolean"}}})),
                "/properties/l",
                "open length",
            ),
            (
                json!({"anyOf": [{"type": "object", "additionalProperties": false}, {"type": "null"}]}),
                "/anyOf/0",
                "joint constraint",
            ),
            (
                json!({"allOf": [{"type": "boolean"}]}),
                "/allOf",
                "joint constraints",
            ),
            (
                json!({"type": "string", "enum": ["a", 1]}),
                "/enum/1",
                "not admitted",
            ),
            (
                json!({"type": "string", "enum": ["a", "a", 1]}),
                "/enum/2",
                "1 is not admitted",
            ),
            (
                json!({"type": "object", "prefixItems": [{"type": "boolean"}], "items": false, "minItems": 1}),
                "/type",
                "does not fit",
            ),
            (
                json!({"type": "string", "additionalProperties": false, "properties": {}}),
                "/type",
                "does not fit",
            ),
            (
                json!({"prefixItems": [{"type": "boolean"}, {"type": "null"}], "items": false, "minItems": 2, "maxItems": 1}),
                "/maxItems",
                "no value",
            ),
            (
                json!({"type": "integer", "minimum": 1e17, "maximum": 1e17}),
                "",
                "beyond ±2^53",
            ),
            (json!({"enum": []}), "", "no value"),
            (json!(true), "", "any value"),
            (
                json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "boolean"}),
                "/$schema",
                "Draft 2020-12",
            ),
        ];
        for (schema, pointer, words) in cases {
            let error = fails(schema.clone());
            assert_eq!(error.pointer, pointer, "{schema}: {error:?}");
            assert!(error.message.contains(words), "{schema}: {error:?}");
        }
    }

    #[test]
    fn fields_and_depth_are_limited_by_settings() {
        let mut limits = limits();
        limits.max_fields = 2;
        let three = json!({"type": "object", "additionalProperties": false, "required": ["a", "b", "c"],
            "properties": {"a": {"type": "boolean"}, "b": {"type": "boolean"}, "c": {"type": "boolean"}}});
        let error = compile(&three, &limits).unwrap_err();
        assert_eq!(error.pointer, "/properties/c");
        assert!(error.message.contains("--schema-max-fields"), "{error:?}");
        limits.max_depth = 1;
        let nested = json!({"type": "object", "additionalProperties": false, "required": ["a"],
            "properties": {"a": {"type": "object", "additionalProperties": false, "properties": {}}}});
        let error = compile(&nested, &limits).unwrap_err();
        assert_eq!(error.pointer, "/properties/a");
        assert!(error.message.contains("--schema-max-depth"), "{error:?}");
    }
}
