//! Order-preserving key encoding for checkpoints and bounds (EX-2).
//!
//! A checkpoint and a bound are stored as `bytea`. PostgreSQL compares
//! `bytea` bytewise, so the encoding is built so that bytewise order equals
//! the key's own [`Ord`]: the fence in `store::checkpoint_advance_commit` and the
//! table's `CHECK (checkpoint <= bound)` then compare keys in their own type,
//! never through a lossy text rendering.
//!
//! Every component starts with a one-byte type tag. The tag makes the encoding
//! self-describing: a process whose definition declares a different key type
//! than the one a row's bound was captured with gets a typed
//! [`KeyError::TypeMismatch`] instead of misreading the bytes (REG-4, fail
//! closed), and the admin API can render any stored key as JSON.
//!
//! Component encodings:
//! - integers: tag, then big-endian with the sign bit flipped;
//! - text: tag, then the UTF-8 bytes with `0x00` escaped as `0x00 0xFF`,
//!   terminated by `0x00 0x01` (so a prefix sorts first);
//! - uuid: tag, then its 16 bytes;
//! - timestamps: tag, then microseconds since the epoch as a flipped i64;
//! - tuples: the concatenation of their components (each is self-delimiting,
//!   so concatenation is lexicographic order).

use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;
use std::fmt::Debug;
use uuid::Uuid;

const TAG_I32: u8 = 0x11;
const TAG_I64: u8 = 0x12;
const TAG_TEXT: u8 = 0x20;
const TAG_UUID: u8 = 0x30;
const TAG_TIMESTAMP: u8 = 0x40;

/// Why a stored key could not be read back as the definition's key type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The bytes were written by a different key type than the one the local
    /// definition declares (e.g. a text bound read as a bigint key).
    #[error("stored key has type tag {found:#04x}, the definition expects {expected}")]
    TypeMismatch {
        /// The name of the key type the definition declares.
        expected: &'static str,
        /// The type tag found in the stored bytes.
        found: u8,
    },
    /// The bytes end early or carry trailing data.
    #[error("stored key is truncated or has trailing bytes")]
    Malformed,
    /// A timestamp outside chrono's range.
    #[error("stored timestamp is out of range")]
    OutOfRange,
}

/// A checkpoint/bound key: a type with a total order whose encoding preserves
/// that order bytewise (EX-2).
///
/// Implemented for `i32`, `i64`, `String`, [`Uuid`], `DateTime<Utc>` and
/// tuples of up to three of them, e.g. `(DateTime<Utc>, i64)` for a
/// `(created_at, id)` compound key that cannot skip or repeat ties.
///
/// Text keys compare bytewise (Rust's `String` order). A repair that keys by
/// text must therefore order and compare with `COLLATE "C"` in its SQL;
/// otherwise the engine rejects the batch as out of order rather than risk
/// skipping rows.
pub trait Key: Clone + Ord + Debug + Send + Sync + 'static {
    /// A readable name of the type, recorded with the bound (diagnostic).
    fn type_name() -> String;
    /// Append the order-preserving encoding of `self` to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Read one value from the front of `input`, advancing it.
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError>;
    /// Readable JSON rendering for the admin API (never used for ordering).
    fn to_json(&self) -> Value;

    /// The whole encoding as a fresh vector.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        self.encode(&mut out);
        out
    }

    /// Decode a complete encoding; trailing bytes are an error.
    fn from_bytes(bytes: &[u8]) -> Result<Self, KeyError> {
        let mut input = bytes;
        let key = Self::decode(&mut input)?;
        if input.is_empty() {
            Ok(key)
        } else {
            Err(KeyError::Malformed)
        }
    }
}

fn take_tag(input: &mut &[u8], tag: u8, expected: &'static str) -> Result<(), KeyError> {
    match input.split_first() {
        Some((&found, rest)) if found == tag => {
            *input = rest;
            Ok(())
        }
        Some((&found, _)) => Err(KeyError::TypeMismatch { expected, found }),
        None => Err(KeyError::Malformed),
    }
}

fn take<const N: usize>(input: &mut &[u8]) -> Result<[u8; N], KeyError> {
    if input.len() < N {
        return Err(KeyError::Malformed);
    }
    let (head, rest) = input.split_at(N);
    *input = rest;
    let mut out = [0u8; N];
    out.copy_from_slice(head);
    Ok(out)
}

impl Key for i64 {
    fn type_name() -> String {
        "bigint".into()
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG_I64);
        out.extend_from_slice(&((*self as u64) ^ (1 << 63)).to_be_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError> {
        take_tag(input, TAG_I64, "bigint")?;
        Ok((u64::from_be_bytes(take::<8>(input)?) ^ (1 << 63)) as i64)
    }
    fn to_json(&self) -> Value {
        Value::from(*self)
    }
}

impl Key for i32 {
    fn type_name() -> String {
        "integer".into()
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG_I32);
        out.extend_from_slice(&((*self as u32) ^ (1 << 31)).to_be_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError> {
        take_tag(input, TAG_I32, "integer")?;
        Ok((u32::from_be_bytes(take::<4>(input)?) ^ (1 << 31)) as i32)
    }
    fn to_json(&self) -> Value {
        Value::from(*self)
    }
}

impl Key for String {
    fn type_name() -> String {
        "text".into()
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG_TEXT);
        for &b in self.as_bytes() {
            out.push(b);
            if b == 0 {
                out.push(0xFF);
            }
        }
        out.extend_from_slice(&[0x00, 0x01]);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError> {
        take_tag(input, TAG_TEXT, "text")?;
        let mut bytes = Vec::new();
        loop {
            match input {
                [0x00, 0x01, rest @ ..] => {
                    *input = rest;
                    break;
                }
                [0x00, 0xFF, rest @ ..] => {
                    bytes.push(0);
                    *input = rest;
                }
                [0x00, ..] | [] => return Err(KeyError::Malformed),
                [b, rest @ ..] => {
                    bytes.push(*b);
                    *input = rest;
                }
            }
        }
        String::from_utf8(bytes).map_err(|_| KeyError::Malformed)
    }
    fn to_json(&self) -> Value {
        Value::from(self.as_str())
    }
}

impl Key for Uuid {
    fn type_name() -> String {
        "uuid".into()
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG_UUID);
        out.extend_from_slice(self.as_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError> {
        take_tag(input, TAG_UUID, "uuid")?;
        Ok(Uuid::from_bytes(take::<16>(input)?))
    }
    fn to_json(&self) -> Value {
        Value::from(self.to_string())
    }
}

impl Key for DateTime<Utc> {
    fn type_name() -> String {
        "timestamptz".into()
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG_TIMESTAMP);
        let micros = self.timestamp_micros();
        out.extend_from_slice(&((micros as u64) ^ (1 << 63)).to_be_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError> {
        take_tag(input, TAG_TIMESTAMP, "timestamptz")?;
        let micros = (u64::from_be_bytes(take::<8>(input)?) ^ (1 << 63)) as i64;
        Utc.timestamp_micros(micros)
            .single()
            .ok_or(KeyError::OutOfRange)
    }
    fn to_json(&self) -> Value {
        Value::from(self.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
    }
}

impl<A: Key, B: Key> Key for (A, B) {
    fn type_name() -> String {
        format!("({}, {})", A::type_name(), B::type_name())
    }
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError> {
        Ok((A::decode(input)?, B::decode(input)?))
    }
    fn to_json(&self) -> Value {
        Value::Array(vec![self.0.to_json(), self.1.to_json()])
    }
}

impl<A: Key, B: Key, C: Key> Key for (A, B, C) {
    fn type_name() -> String {
        format!(
            "({}, {}, {})",
            A::type_name(),
            B::type_name(),
            C::type_name()
        )
    }
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
        self.2.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError> {
        Ok((A::decode(input)?, B::decode(input)?, C::decode(input)?))
    }
    fn to_json(&self) -> Value {
        Value::Array(vec![self.0.to_json(), self.1.to_json(), self.2.to_json()])
    }
}

/// Render any stored key (self-describing encoding) as JSON, without knowing
/// its Rust type. `None` when the bytes are not a valid encoding; the admin
/// API shows such a key as unknown (ADM-3), never as a guess.
#[doc(hidden)]
pub fn render_json(bytes: &[u8]) -> Option<Value> {
    let mut input = bytes;
    let mut parts = Vec::new();
    while let Some(&tag) = input.first() {
        let value = match tag {
            TAG_I32 => i32::decode(&mut input).ok()?.to_json(),
            TAG_I64 => i64::decode(&mut input).ok()?.to_json(),
            TAG_TEXT => String::decode(&mut input).ok()?.to_json(),
            TAG_UUID => Uuid::decode(&mut input).ok()?.to_json(),
            TAG_TIMESTAMP => DateTime::<Utc>::decode(&mut input).ok()?.to_json(),
            _ => return None,
        };
        parts.push(value);
    }
    match parts.len() {
        0 => None,
        1 => parts.pop(),
        _ => Some(Value::Array(parts)),
    }
}

/// The schema of a rendered key ([`render_json`]), declared as
/// what the server sends (API-1): an integer (`i32`, `i64`), a string
/// (text, UUID, RFC 3339 timestamp), a flat array of those for a compound
/// key, or `null`.
#[cfg(feature = "http")]
pub(crate) fn key_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};
    let scalar = || {
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Integer).format(Some(
                utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Int64),
            )))
            .item(ObjectBuilder::new().schema_type(Type::String))
    };
    scalar()
        .item(
            ArrayBuilder::new()
                .items(scalar())
                .min_items(Some(2))
                .max_items(Some(3)),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(
            "A key in its own JSON type: integer for i32/i64 keys, string for text, UUID and \
             timestamp keys, an array of those for compound keys; null when unknown or absent.",
        ))
        .build()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_order_preserved<K: Key>(mut values: Vec<K>) {
        values.sort();
        for pair in values.windows(2) {
            let (a, b) = (pair[0].to_bytes(), pair[1].to_bytes());
            assert_eq!(
                pair[0].cmp(&pair[1]),
                a.cmp(&b),
                "{:?} vs {:?}",
                pair[0],
                pair[1]
            );
        }
        for v in &values {
            assert_eq!(&K::from_bytes(&v.to_bytes()).unwrap(), v);
        }
    }

    #[test]
    fn ex02_integers_keep_order_across_sign() {
        assert_order_preserved(vec![i64::MIN, -300, -1, 0, 1, 255, 256, i64::MAX]);
        assert_order_preserved(vec![i32::MIN, -2, 0, 7, i32::MAX]);
    }

    #[test]
    fn ex02_text_keeps_prefix_and_nul_order() {
        assert_order_preserved(
            ["", "a", "a\0", "a\0b", "ab", "b", "\u{e9}", "zz"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        );
    }

    #[test]
    fn ex02_compound_keys_order_ties_by_second_component() {
        let t0 = Utc.timestamp_micros(1_000).unwrap();
        let t1 = Utc.timestamp_micros(-5).unwrap();
        assert_order_preserved(vec![(t0, 2i64), (t0, 1), (t1, 9), (t1, -9)]);
        assert_order_preserved(vec![
            ("a".to_string(), 2i64),
            ("a".to_string(), 10),
            ("ab".to_string(), 1),
        ]);
    }

    #[test]
    fn reg04_wrong_type_is_a_typed_mismatch() {
        let bytes = "x".to_string().to_bytes();
        assert!(matches!(
            i64::from_bytes(&bytes),
            Err(KeyError::TypeMismatch { .. })
        ));
        assert_eq!(i64::from_bytes(&[TAG_I64, 1]), Err(KeyError::Malformed));
        let mut long = 5i64.to_bytes();
        long.push(0);
        assert_eq!(i64::from_bytes(&long), Err(KeyError::Malformed));
    }

    #[test]
    fn api01_render_json_reads_any_stored_key() {
        let t = Utc.timestamp_micros(0).unwrap();
        assert_eq!(render_json(&7i64.to_bytes()), Some(Value::from(7)));
        assert_eq!(
            render_json(&(t, 3i64).to_bytes()),
            Some(serde_json::json!(["1970-01-01T00:00:00.000000Z", 3]))
        );
        assert_eq!(render_json(&[0x99]), None);
    }
}
