//! Mem0's filter language, read into a predicate over memories, and the part of it engram's
//! store can apply itself.
//!
//! A filter is a JSON object. Its keys are ANDed; each is a logical operator (`AND` and `OR`
//! over a list of filters, `NOT` over a filter or a list of them) or a field with a bare value
//! (equality; `"*"` means "has any value") or an object of operators: `eq ne in gt gte lt lte
//! contains icontains`. Fields: `user_id agent_id app_id run_id` (scope), `created_at
//! updated_at expiration_date` (times: RFC 3339 or a date), `categories`, `metadata` (an object
//! of key conditions), `keywords` (the text) and `memory_ids`.
//!
//! The hosted platform refuses other top-level keys; the open-source server reads them as
//! metadata keys ([`Dialect`]).

use std::collections::BTreeSet;

use engram_core::{Filter, Memory, MetaCondition};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The deepest nesting of logical operators accepted (a bound on recursion for any input).
const MAX_DEPTH: usize = 16;
/// The most conditions one filter may hold.
const MAX_CONDITIONS: usize = 256;

/// Which server's rules a filter follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The hosted platform: unknown top-level keys are refused.
    Platform,
    /// The open-source server: unknown top-level keys are metadata keys.
    OpenSource,
}

/// A field a condition is about.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    /// The owner.
    UserId,
    /// The agent scope.
    AgentId,
    /// The app scope (kept in the memory's metadata as `app_id`).
    AppId,
    /// The run (engram's session).
    RunId,
    /// When it was stored.
    CreatedAt,
    /// When it last changed.
    UpdatedAt,
    /// When it expires.
    ExpirationDate,
    /// Its category (engram keeps one; Mem0 a list).
    Categories,
    /// One metadata key.
    Metadata(String),
    /// The text.
    Keywords,
    /// The id.
    MemoryId,
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Equal.
    Eq,
    /// Not equal (absent counts as not equal).
    Ne,
    /// One of a list.
    In,
    /// Greater than.
    Gt,
    /// At least.
    Gte,
    /// Less than.
    Lt,
    /// At most.
    Lte,
    /// Contains the text (case-sensitive, but case-insensitive for categories as in Mem0).
    Contains,
    /// Contains the text, whatever the case.
    IContains,
    /// Has any value (`"*"`).
    Any,
}

impl Op {
    fn parse(name: &str) -> Option<Op> {
        Some(match name {
            "eq" => Op::Eq,
            "ne" => Op::Ne,
            "in" => Op::In,
            "gt" => Op::Gt,
            "gte" => Op::Gte,
            "lt" => Op::Lt,
            "lte" => Op::Lte,
            "contains" => Op::Contains,
            "icontains" => Op::IContains,
            _ => return None,
        })
    }
}

/// A filter, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    /// Every one holds (an empty list always holds).
    And(Vec<Cond>),
    /// At least one holds.
    Or(Vec<Cond>),
    /// It does not hold.
    Not(Box<Cond>),
    /// A comparison of a field with a value.
    Compare {
        /// The field.
        field: Field,
        /// How.
        op: Op,
        /// With what (for times, already read as a time).
        value: Operand,
    },
}

/// What a field is compared with.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// Nothing (`"*"`).
    None,
    /// A JSON value.
    Json(Value),
    /// A list of JSON values (`in`).
    List(Vec<Value>),
    /// A time.
    Time(Timestamp),
    /// A list of times.
    Times(Vec<Timestamp>),
}

/// Reads a filter object.
pub fn parse(filters: &Map<String, Value>, dialect: Dialect) -> Result<Cond, ApiError> {
    let mut count = 0;
    parse_object(filters, dialect, 0, &mut count, "filters")
}

fn parse_object(
    object: &Map<String, Value>,
    dialect: Dialect,
    depth: usize,
    count: &mut usize,
    at: &str,
) -> Result<Cond, ApiError> {
    if depth > MAX_DEPTH {
        return Err(ApiError::invalid(format!(
            "{at}: logical operators nest more than {MAX_DEPTH} deep"
        )));
    }
    let mut all = Vec::with_capacity(object.len());
    for (key, value) in object {
        let here = format!("{at}.{key}");
        match key.as_str() {
            "AND" | "OR" => {
                let items = value
                    .as_array()
                    .ok_or_else(|| ApiError::invalid(format!("{here}: takes a list of filters")))?;
                if items.is_empty() {
                    return Err(ApiError::invalid(format!("{here}: the list is empty")));
                }
                let mut parts = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let item_at = format!("{here}[{i}]");
                    let object = item.as_object().ok_or_else(|| {
                        ApiError::invalid(format!("{item_at}: must be a filter object"))
                    })?;
                    parts.push(parse_object(object, dialect, depth + 1, count, &item_at)?);
                }
                all.push(if key == "AND" {
                    Cond::And(parts)
                } else {
                    Cond::Or(parts)
                });
            }
            "NOT" => {
                let inner = match value {
                    Value::Object(object) => {
                        parse_object(object, dialect, depth + 1, count, &here)?
                    }
                    Value::Array(items) if !items.is_empty() => {
                        let mut parts = Vec::with_capacity(items.len());
                        for (i, item) in items.iter().enumerate() {
                            let item_at = format!("{here}[{i}]");
                            let object = item.as_object().ok_or_else(|| {
                                ApiError::invalid(format!("{item_at}: must be a filter object"))
                            })?;
                            parts.push(parse_object(object, dialect, depth + 1, count, &item_at)?);
                        }
                        // NOT [a, b]: none of them holds.
                        Cond::Or(parts)
                    }
                    _ => {
                        return Err(ApiError::invalid(format!(
                            "{here}: takes a filter object or a non-empty list of them"
                        )));
                    }
                };
                all.push(Cond::Not(Box::new(inner)));
            }
            "metadata" => {
                let object = value.as_object().ok_or_else(|| {
                    ApiError::invalid(format!(
                        "{here}: takes an object of metadata keys and their conditions"
                    ))
                })?;
                for (meta_key, condition) in object {
                    let field = Field::Metadata(meta_key.clone());
                    all.extend(parse_field(
                        field,
                        condition,
                        count,
                        &format!("{here}.{meta_key}"),
                    )?);
                }
            }
            other => {
                let field = match other {
                    "user_id" => Field::UserId,
                    "agent_id" => Field::AgentId,
                    "app_id" => Field::AppId,
                    "run_id" => Field::RunId,
                    "created_at" => Field::CreatedAt,
                    "updated_at" => Field::UpdatedAt,
                    "expiration_date" => Field::ExpirationDate,
                    "categories" => Field::Categories,
                    "keywords" | "text" => Field::Keywords,
                    "memory_ids" => Field::MemoryId,
                    _ if dialect == Dialect::OpenSource => Field::Metadata(other.to_string()),
                    _ => {
                        return Err(ApiError::invalid(format!(
                            "{here}: a top-level key must be a logical operator or an allowed \
                             field: AND, OR, NOT, user_id, agent_id, app_id, run_id, created_at, \
                             updated_at, expiration_date, text, categories, metadata, keywords, \
                             memory_ids"
                        )));
                    }
                };
                all.extend(parse_field(field, value, count, &here)?);
            }
        }
    }
    Ok(if all.len() == 1 {
        all.remove(0)
    } else {
        Cond::And(all)
    })
}

/// The conditions on one field: a bare value, `"*"`, a list (for memory_ids), or an object of
/// operators.
fn parse_field(
    field: Field,
    value: &Value,
    count: &mut usize,
    at: &str,
) -> Result<Vec<Cond>, ApiError> {
    let pairs: Vec<(Op, &Value)> = match value {
        Value::String(s) if s == "*" => vec![(Op::Any, value)],
        Value::Object(ops) => {
            if ops.is_empty() {
                return Err(ApiError::invalid(format!("{at}: no operator given")));
            }
            ops.iter()
                .map(|(name, v)| {
                    Op::parse(name).map(|op| (op, v)).ok_or_else(|| {
                        ApiError::invalid(format!(
                            "{at}: unknown operator '{name}' (expected one of: eq, ne, in, gt, \
                             gte, lt, lte, contains, icontains)"
                        ))
                    })
                })
                .collect::<Result<_, _>>()?
        }
        Value::Array(_) if field == Field::MemoryId => vec![(Op::In, value)],
        Value::Array(_) | Value::Null => {
            return Err(ApiError::invalid(format!(
                "{at}: give a value, \"*\", or an object of operators such as {{\"in\": [...]}}"
            )));
        }
        _ => vec![(Op::Eq, value)],
    };
    let mut out = Vec::with_capacity(pairs.len());
    for (op, operand) in pairs {
        *count += 1;
        if *count > MAX_CONDITIONS {
            return Err(ApiError::invalid(format!(
                "filters: more than {MAX_CONDITIONS} conditions"
            )));
        }
        out.push(Cond::Compare {
            value: operand_for(&field, op, operand, at)?,
            field: field.clone(),
            op,
        });
    }
    Ok(out)
}

fn is_time(field: &Field) -> bool {
    matches!(
        field,
        Field::CreatedAt | Field::UpdatedAt | Field::ExpirationDate
    )
}

fn operand_for(field: &Field, op: Op, value: &Value, at: &str) -> Result<Operand, ApiError> {
    let allowed: &[Op] = match field {
        Field::UserId | Field::AgentId | Field::AppId | Field::RunId => {
            &[Op::Eq, Op::Ne, Op::In, Op::Any]
        }
        Field::CreatedAt | Field::UpdatedAt | Field::ExpirationDate => &[
            Op::Eq,
            Op::Ne,
            Op::In,
            Op::Gt,
            Op::Gte,
            Op::Lt,
            Op::Lte,
            Op::Any,
        ],
        Field::Categories => &[Op::Eq, Op::In, Op::Contains, Op::IContains, Op::Any],
        Field::Keywords => &[Op::Eq, Op::Contains, Op::IContains],
        Field::MemoryId => &[Op::Eq, Op::In],
        Field::Metadata(_) => &[
            Op::Eq,
            Op::Ne,
            Op::In,
            Op::Gt,
            Op::Gte,
            Op::Lt,
            Op::Lte,
            Op::Contains,
            Op::IContains,
            Op::Any,
        ],
    };
    if !allowed.contains(&op) {
        return Err(ApiError::invalid(format!(
            "{at}: this field does not take the operator {op:?}"
        )));
    }
    if op == Op::Any {
        return Ok(Operand::None);
    }
    if op == Op::In {
        let items = value
            .as_array()
            .ok_or_else(|| ApiError::invalid(format!("{at}: 'in' takes a list")))?;
        if is_time(field) {
            return items
                .iter()
                .map(|v| time_value(v, at))
                .collect::<Result<_, _>>()
                .map(Operand::Times);
        }
        for item in items {
            if !is_scalar(item) {
                return Err(ApiError::invalid(format!(
                    "{at}: 'in' takes a list of strings, numbers or booleans"
                )));
            }
        }
        return Ok(Operand::List(items.clone()));
    }
    if is_time(field) {
        return time_value(value, at).map(Operand::Time);
    }
    if !is_scalar(value) {
        return Err(ApiError::invalid(format!(
            "{at}: compare with a string, number or boolean"
        )));
    }
    if matches!(op, Op::Contains | Op::IContains) && !value.is_string() {
        return Err(ApiError::invalid(format!("{at}: 'contains' takes text")));
    }
    Ok(Operand::Json(value.clone()))
}

fn is_scalar(value: &Value) -> bool {
    matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

/// A time as filters give it: RFC 3339, a date (midnight UTC), or Unix seconds.
fn time_value(value: &Value, at: &str) -> Result<Timestamp, ApiError> {
    match value {
        Value::String(s) => {
            super::item::parse_date_or_time(s).map_err(|e| ApiError::invalid(format!("{at}: {e}")))
        }
        Value::Number(n) => n
            .as_f64()
            .and_then(|secs| Timestamp::from_microsecond((secs * 1e6) as i64).ok())
            .ok_or_else(|| ApiError::invalid(format!("{at}: {n} is not a time"))),
        _ => Err(ApiError::invalid(format!(
            "{at}: a time is a date, an RFC 3339 time or Unix seconds"
        ))),
    }
}

/// A JSON value as text, the way equality compares it (`3` equals `"3"`).
fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn values_equal(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => text_of(a).is_some_and(|t| Some(t) == text_of(b)),
    }
}

fn compare_values(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x.partial_cmp(&y),
        _ => match (a, b) {
            (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
            _ => None,
        },
    }
}

/// The value of a scope or metadata field of a memory, as JSON (`None` when absent).
fn field_value(memory: &Memory, field: &Field) -> Option<Value> {
    match field {
        Field::UserId => Some(Value::String(memory.scope.user_id.clone())),
        Field::AgentId => memory.scope.agent_id.clone().map(Value::String),
        Field::RunId => memory.scope.session_id.clone().map(Value::String),
        Field::AppId => memory.metadata.get(super::item::APP_ID).cloned(),
        Field::Metadata(key) => memory.metadata.get(key).cloned(),
        Field::Keywords => Some(Value::String(memory.text.clone())),
        Field::MemoryId => Some(Value::String(memory.id.to_string())),
        Field::Categories => memory.category.clone().map(Value::String),
        Field::CreatedAt | Field::UpdatedAt | Field::ExpirationDate => None,
    }
}

fn time_of(memory: &Memory, field: &Field) -> Option<Timestamp> {
    match field {
        Field::CreatedAt => Some(memory.created_at),
        Field::UpdatedAt => Some(memory.updated_at),
        Field::ExpirationDate => memory.expires_at,
        _ => None,
    }
}

impl Cond {
    /// True when the memory passes the filter.
    pub fn matches(&self, memory: &Memory) -> bool {
        match self {
            Cond::And(all) => all.iter().all(|c| c.matches(memory)),
            Cond::Or(any) => any.iter().any(|c| c.matches(memory)),
            Cond::Not(inner) => !inner.matches(memory),
            Cond::Compare { field, op, value } => compare(memory, field, *op, value),
        }
    }

    /// The users the filter confines itself to, when it names them: `user_id` equal to or in
    /// a list, in a conjunct or in every branch of a disjunction. `None` when any user could
    /// match.
    pub fn users(&self) -> Option<BTreeSet<String>> {
        match self {
            Cond::Compare {
                field: Field::UserId,
                op: Op::Eq,
                value: Operand::Json(v),
            } => text_of(v).map(|u| BTreeSet::from([u])),
            Cond::Compare {
                field: Field::UserId,
                op: Op::In,
                value: Operand::List(items),
            } => Some(items.iter().filter_map(text_of).collect()),
            Cond::And(all) => all
                .iter()
                .filter_map(Cond::users)
                .reduce(|a, b| a.intersection(&b).cloned().collect()),
            Cond::Or(any) => {
                let mut union = BTreeSet::new();
                for c in any {
                    union.extend(c.users()?);
                }
                Some(union)
            }
            _ => None,
        }
    }

    /// True when the filter names a scope (user, agent, app or run), as Mem0 requires.
    pub fn names_a_scope(&self) -> bool {
        match self {
            Cond::Compare { field, .. } => matches!(
                field,
                Field::UserId | Field::AgentId | Field::AppId | Field::RunId
            ),
            Cond::And(all) | Cond::Or(all) => all.iter().any(Cond::names_a_scope),
            Cond::Not(inner) => inner.names_a_scope(),
        }
    }

    /// Narrows `filter` by what the store can apply itself (conjuncts on agent, run, app,
    /// category and metadata equality, and creation-time bounds), and says whether that was
    /// all of the filter (then nothing is left to check on each memory).
    pub fn push_down(&self, filter: &mut Filter) -> bool {
        let conjuncts: Vec<&Cond> = match self {
            Cond::And(all) => all.iter().collect(),
            other => vec![other],
        };
        let mut exact = true;
        for c in conjuncts {
            exact &= push_one(c, filter);
        }
        exact
    }
}

/// Applies one conjunct to the store filter if it can; true when it was fully applied.
fn push_one(cond: &Cond, filter: &mut Filter) -> bool {
    let Cond::Compare { field, op, value } = cond else {
        return false;
    };
    match (field, op, value) {
        // The store searches one user at a time: the caller runs one search per user.
        (Field::UserId, Op::Eq | Op::In, _) => true,
        (Field::AgentId, Op::Eq, Operand::Json(v)) if filter.agent_id.is_none() => {
            filter.agent_id = text_of(v);
            filter.agent_id.is_some()
        }
        (Field::RunId, Op::Eq, Operand::Json(v)) if filter.session_id.is_none() => {
            filter.session_id = text_of(v);
            filter.session_id.is_some()
        }
        (Field::Categories, Op::In, Operand::List(items)) if filter.categories.is_empty() => {
            filter.categories = items.iter().filter_map(text_of).collect();
            // An empty list matches nothing; leave that to the check on each memory.
            !filter.categories.is_empty()
        }
        (Field::Categories, Op::Eq, Operand::Json(v)) if filter.categories.is_empty() => {
            filter.categories = text_of(v).into_iter().collect();
            !filter.categories.is_empty()
        }
        (Field::AppId | Field::Metadata(_), Op::Eq, Operand::Json(v)) => {
            let key = match field {
                Field::Metadata(key) => key.clone(),
                _ => super::item::APP_ID.to_string(),
            };
            match text_of(v) {
                // The store compares metadata as text; numbers compare exactly only when the
                // check on each memory runs too.
                Some(text) => {
                    let exact = v.is_string();
                    filter.metadata.push(MetaCondition { key, value: text });
                    exact
                }
                None => false,
            }
        }
        (Field::CreatedAt, Op::Gte | Op::Gt, Operand::Time(t)) => {
            let from = if *op == Op::Gt {
                t.checked_add(SignedDuration::from_micros(1)).unwrap_or(*t)
            } else {
                *t
            };
            filter.since = Some(filter.since.map_or(from, |s| s.max(from)));
            true
        }
        (Field::CreatedAt, Op::Lt | Op::Lte, Operand::Time(t)) => {
            let until = if *op == Op::Lte {
                t.checked_add(SignedDuration::from_micros(1)).unwrap_or(*t)
            } else {
                *t
            };
            filter.until = Some(filter.until.map_or(until, |u| u.min(until)));
            true
        }
        _ => false,
    }
}

fn compare(memory: &Memory, field: &Field, op: Op, operand: &Operand) -> bool {
    if let Some(time_field) = is_time(field).then_some(field) {
        let Some(t) = time_of(memory, time_field) else {
            return op == Op::Ne;
        };
        // Times compare at the microsecond; a date matches the whole day for equality.
        return match (op, operand) {
            (Op::Any, _) => true,
            (Op::Eq, Operand::Time(v)) => same_time(t, *v),
            (Op::Ne, Operand::Time(v)) => !same_time(t, *v),
            (Op::In, Operand::Times(vs)) => vs.iter().any(|v| same_time(t, *v)),
            (Op::Gt, Operand::Time(v)) => t > *v,
            (Op::Gte, Operand::Time(v)) => t >= *v,
            (Op::Lt, Operand::Time(v)) => t < *v,
            (Op::Lte, Operand::Time(v)) => t <= *v,
            _ => false,
        };
    }
    let actual = field_value(memory, field);
    match (op, operand) {
        (Op::Any, _) => actual.is_some_and(|v| !v.is_null()),
        (Op::Eq, Operand::Json(v)) => actual.is_some_and(|a| values_equal(&a, v)),
        (Op::Ne, Operand::Json(v)) => !actual.is_some_and(|a| values_equal(&a, v)),
        (Op::In, Operand::List(vs)) => {
            actual.is_some_and(|a| vs.iter().any(|v| values_equal(&a, v)))
        }
        (Op::Gt | Op::Gte | Op::Lt | Op::Lte, Operand::Json(v)) => {
            let Some(order) = actual.and_then(|a| compare_values(&a, v)) else {
                return false;
            };
            match op {
                Op::Gt => order.is_gt(),
                Op::Gte => order.is_ge(),
                Op::Lt => order.is_lt(),
                _ => order.is_le(),
            }
        }
        (Op::Contains | Op::IContains, Operand::Json(Value::String(needle))) => {
            let Some(hay) = actual.as_ref().and_then(text_of) else {
                return false;
            };
            // Categories match without regard to case, as Mem0 documents.
            if op == Op::IContains || *field == Field::Categories {
                hay.to_lowercase().contains(&needle.to_lowercase())
            } else {
                hay.contains(needle.as_str())
            }
        }
        _ => false,
    }
}

/// Equal times; a time at midnight UTC (a date) matches every moment of that day.
fn same_time(actual: Timestamp, wanted: Timestamp) -> bool {
    if actual == wanted {
        return true;
    }
    let day = SignedDuration::from_hours(24);
    let is_midnight = wanted.as_second().rem_euclid(86_400) == 0 && wanted.subsec_nanosecond() == 0;
    is_midnight && actual >= wanted && wanted.checked_add(day).is_ok_and(|end| actual < end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::{NewMemory, Scope};
    use serde_json::json;

    fn memory(
        user: &str,
        agent: Option<&str>,
        text: &str,
        category: Option<&str>,
        meta: Value,
    ) -> Memory {
        let mut scope = Scope::user(user);
        scope.agent_id = agent.map(str::to_string);
        let new = NewMemory::new(scope, text);
        Memory {
            id: engram_core::MemoryId::new(),
            content_hash: new.content_hash(),
            scope: new.scope,
            kind: new.kind,
            text: new.text,
            category: category.map(str::to_string),
            importance: new.importance,
            metadata: meta.as_object().cloned().unwrap_or_default(),
            created_at: "2024-05-08T13:56:00Z".parse().unwrap(),
            updated_at: "2024-05-09T00:00:00Z".parse().unwrap(),
            valid_from: "2024-05-08T13:56:00Z".parse().unwrap(),
            valid_to: None,
            expires_at: None,
            source: "api".into(),
        }
    }

    fn cond(filters: Value, dialect: Dialect) -> Result<Cond, ApiError> {
        parse(filters.as_object().unwrap(), dialect)
    }

    #[test]
    fn the_documented_examples_read_and_match() {
        let alice = memory(
            "alice",
            Some("travel-agent"),
            "Likes cricket",
            Some("hobbies"),
            json!({"source": "email", "n": 3}),
        );
        let bob = memory(
            "bob",
            None,
            "Pays invoices monthly",
            Some("finance"),
            json!({}),
        );
        let cases = [
            (json!({"user_id": "alice"}), true, false),
            (
                json!({"AND": [{"user_id": "alice"}, {"run_id": "*"}]}),
                false,
                false,
            ),
            (
                json!({"AND": [{"user_id": "alice"}, {"agent_id": "*"}]}),
                true,
                false,
            ),
            (
                json!({"OR": [{"user_id": "bob"}, {"agent_id": {"in": ["travel-agent", "sports-agent"]}}]}),
                true,
                true,
            ),
            (json!({"categories": {"contains": "FIN"}}), false, true),
            (
                json!({"categories": {"in": ["hobbies", "health"]}}),
                true,
                false,
            ),
            (
                json!({"NOT": {"categories": {"in": ["finance"]}}}),
                true,
                false,
            ),
            (json!({"metadata": {"source": "email"}}), true, false),
            (json!({"metadata": {"n": {"gte": 3}}}), true, false),
            (
                json!({"metadata": {"source": {"ne": "email"}}}),
                false,
                true,
            ),
            (json!({"keywords": {"icontains": "INVOICE"}}), false, true),
            (json!({"keywords": {"contains": "INVOICE"}}), false, false),
            (
                json!({"created_at": {"gte": "2024-05-01", "lt": "2024-06-01T00:00:00Z"}}),
                true,
                true,
            ),
            (json!({"created_at": "2024-05-08"}), true, true),
            (json!({"updated_at": {"gt": "2024-05-09"}}), false, false),
            (json!({"user_id": {"ne": "alice"}}), false, true),
            (json!({"memory_ids": [bob.id.to_string()]}), false, true),
        ];
        for (filters, want_alice, want_bob) in cases {
            let c = cond(filters.clone(), Dialect::Platform).unwrap();
            assert_eq!(c.matches(&alice), want_alice, "{filters} on alice");
            assert_eq!(c.matches(&bob), want_bob, "{filters} on bob");
        }
    }

    #[test]
    fn the_platform_refuses_what_it_does_not_know_and_the_open_source_server_reads_metadata() {
        let filters = json!({"user_id": "alice", "source": "email"});
        let err = cond(filters.clone(), Dialect::Platform).unwrap_err();
        assert!(err.message.contains("filters.source"), "{}", err.message);
        let c = cond(filters, Dialect::OpenSource).unwrap();
        assert!(c.matches(&memory(
            "alice",
            None,
            "x",
            None,
            json!({"source": "email"})
        )));
        for bad in [
            json!({"user_id": {"like": "a%"}}),
            json!({"AND": {"user_id": "a"}}),
            json!({"AND": []}),
            json!({"categories": {"gt": "a"}}),
            json!({"created_at": {"gte": "yesterday-ish"}}),
            json!({"user_id": null}),
            json!({"metadata": "x"}),
            json!({"agent_id": {"in": "a"}}),
        ] {
            assert!(cond(bad.clone(), Dialect::Platform).is_err(), "{bad}");
        }
    }

    #[test]
    fn users_are_found_where_the_filter_pins_them() {
        let users = |v: Value| cond(v, Dialect::Platform).unwrap().users();
        assert_eq!(
            users(json!({"user_id": "a"})),
            Some(BTreeSet::from(["a".to_string()]))
        );
        assert_eq!(
            users(json!({"OR": [{"user_id": "a"}, {"user_id": {"in": ["b", "c"]}}]})),
            Some(BTreeSet::from(["a".into(), "b".into(), "c".into()]))
        );
        assert_eq!(
            users(json!({"OR": [{"user_id": "a"}, {"agent_id": "x"}]})),
            None
        );
        assert_eq!(
            users(json!({"AND": [{"user_id": {"in": ["a", "b"]}}, {"user_id": "b"}]})),
            Some(BTreeSet::from(["b".to_string()]))
        );
        assert_eq!(users(json!({"NOT": {"user_id": "a"}})), None);
        assert!(
            !cond(json!({"categories": {"in": ["x"]}}), Dialect::Platform)
                .unwrap()
                .names_a_scope()
        );
    }

    #[test]
    fn what_the_store_can_apply_is_pushed_down_and_the_rest_is_not_lost() {
        let c = cond(
            json!({"user_id": "a", "agent_id": "x", "run_id": "r", "categories": {"in": ["c"]}, "metadata": {"k": "v"}, "created_at": {"gte": "2024-01-01", "lte": "2024-02-01"}}),
            Dialect::Platform,
        )
        .unwrap();
        let mut filter = Filter::user("a");
        assert!(c.push_down(&mut filter));
        assert_eq!(filter.agent_id.as_deref(), Some("x"));
        assert_eq!(filter.session_id.as_deref(), Some("r"));
        assert_eq!(filter.categories, vec!["c".to_string()]);
        assert_eq!(filter.metadata.len(), 1);
        assert!(filter.since.is_some() && filter.until.is_some());
        let c = cond(
            json!({"user_id": "a", "OR": [{"agent_id": "x"}, {"agent_id": "y"}]}),
            Dialect::Platform,
        )
        .unwrap();
        let mut filter = Filter::user("a");
        assert!(!c.push_down(&mut filter), "an OR is checked on each memory");
    }

    #[test]
    fn deep_or_wide_filters_are_refused_not_followed() {
        let mut deep = json!({"user_id": "a"});
        for _ in 0..40 {
            deep = json!({"NOT": deep});
        }
        assert!(cond(deep, Dialect::Platform).is_err());
        let wide: Vec<Value> = (0..300)
            .map(|i| json!({"user_id": format!("u{i}")}))
            .collect();
        assert!(cond(json!({"OR": wide}), Dialect::Platform).is_err());
    }
}
