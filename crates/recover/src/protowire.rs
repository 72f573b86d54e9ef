//! A small, strict reader of the protobuf wire format, for the few messages
//! recovery reads (etcd's `mvccpb.KeyValue`, the apiserver's
//! `EncryptedObject`, `runtime.Unknown`, `v1.Secret`).
//!
//! Hand-written rather than `prost`-derived so that decoding borrows from the
//! input: a Secret's values are copied exactly once, straight into zeroizing
//! buffers, with no intermediate allocation left behind. Semantics follow the
//! protobuf specification as Go's `proto.Unmarshal` applies it: unknown fields
//! are skipped, a repeated scalar field keeps its last value. Groups
//! (wire types 3 and 4, deprecated, never written by these messages) are
//! refused rather than skipped.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("protobuf message is truncated")]
    Truncated,
    #[error("protobuf varint is longer than 64 bits")]
    VarintOverflow,
    #[error("protobuf field number 0 or above 2^29-1")]
    BadFieldNumber,
    #[error("protobuf field {0} uses a group or an unknown wire type")]
    UnsupportedWireType(u32),
    #[error("protobuf field {field} has wire type {found}, expected {expected}")]
    WrongType {
        field: u32,
        found: &'static str,
        expected: &'static str,
    },
    #[error("protobuf field {0} is not valid UTF-8")]
    NotUtf8(u32),
}

/// One field's payload, borrowed from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// A field number and its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    pub number: u32,
    pub value: Value<'a>,
}

/// Iterates over the fields of one message, in wire order.
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(message: &'a [u8]) -> Self {
        Self { rest: message }
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let mut value: u64 = 0;
        for (i, &byte) in self.rest.iter().enumerate().take(10) {
            // The tenth byte may only carry the 64th bit.
            if i == 9 && byte > 1 {
                return Err(WireError::VarintOverflow);
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.rest = &self.rest[i + 1..];
                return Ok(value);
            }
        }
        if self.rest.len() >= 10 {
            Err(WireError::VarintOverflow)
        } else {
            Err(WireError::Truncated)
        }
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < len {
            return Err(WireError::Truncated);
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    fn field(&mut self) -> Result<Field<'a>, WireError> {
        let tag = self.varint()?;
        let number = u32::try_from(tag >> 3)
            .ok()
            .filter(|n| (1..=0x1fff_ffff).contains(n))
            .ok_or(WireError::BadFieldNumber)?;
        let value = match tag & 7 {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(u64::from_le_bytes(fixed(self.take(8)?))),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| WireError::Truncated)?;
                Value::Bytes(self.take(len)?)
            }
            5 => Value::Fixed32(u32::from_le_bytes(fixed(self.take(4)?))),
            _ => return Err(WireError::UnsupportedWireType(number)),
        };
        Ok(Field { number, value })
    }
}

fn fixed<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(bytes);
    out
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Field<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let item = self.field();
        if item.is_err() {
            // Stop after the first error: the rest cannot be framed.
            self.rest = &[];
        }
        Some(item)
    }
}

impl<'a> Field<'a> {
    fn wrong(&self, expected: &'static str) -> WireError {
        let found = match self.value {
            Value::Varint(_) => "varint",
            Value::Fixed64(_) => "fixed64",
            Value::Bytes(_) => "length-delimited",
            Value::Fixed32(_) => "fixed32",
        };
        WireError::WrongType {
            field: self.number,
            found,
            expected,
        }
    }

    /// A `bytes` field, or an embedded message to read with [`Reader`].
    pub fn bytes(&self) -> Result<&'a [u8], WireError> {
        match self.value {
            Value::Bytes(bytes) => Ok(bytes),
            _ => Err(self.wrong("length-delimited")),
        }
    }

    /// A `string` field; protobuf requires UTF-8 (and Go's decoder checks).
    pub fn str(&self) -> Result<&'a str, WireError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| WireError::NotUtf8(self.number))
    }

    /// An `int64`, `int32` or enum field: a varint read as two's complement.
    pub fn int64(&self) -> Result<i64, WireError> {
        match self.value {
            Value::Varint(v) => Ok(v as i64),
            _ => Err(self.wrong("varint")),
        }
    }

    /// A `bool` field: any non-zero varint is true, as in Go's decoder.
    pub fn bool(&self) -> Result<bool, WireError> {
        match self.value {
            Value::Varint(v) => Ok(v != 0),
            _ => Err(self.wrong("varint")),
        }
    }
}

/// Reads one entry of a `map<string, V>` field: the entry is a message with
/// the key as field 1 and the value as field 2, both optional (an absent key
/// or value is the empty string or empty bytes).
pub fn map_entry(entry: &[u8]) -> Result<(&str, &[u8]), WireError> {
    let mut key = "";
    let mut value: &[u8] = &[];
    for field in Reader::new(entry) {
        let field = field?;
        match field.number {
            1 => key = field.str()?,
            2 => value = field.bytes()?,
            _ => {}
        }
    }
    Ok((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(bytes: &[u8]) -> Result<Vec<Field<'_>>, WireError> {
        Reader::new(bytes).collect()
    }

    #[test]
    fn reads_each_wire_type() {
        let msg = [
            0x08, 0x96, 0x01, // 1: varint 150
            0x12, 0x02, b'h', b'i', // 2: "hi"
            0x19, 1, 0, 0, 0, 0, 0, 0, 0, // 3: fixed64 1
            0x25, 2, 0, 0, 0, // 4: fixed32 2
        ];
        let got = fields(&msg).unwrap();
        assert_eq!(got[0].value, Value::Varint(150));
        assert_eq!(got[1].str().unwrap(), "hi");
        assert_eq!(got[2].value, Value::Fixed64(1));
        assert_eq!(got[3].value, Value::Fixed32(2));
    }

    #[test]
    fn negative_int64_is_ten_bytes() {
        let msg = [
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert_eq!(fields(&msg).unwrap()[0].int64().unwrap(), -1);
    }

    #[test]
    fn refuses_malformed_input() {
        assert_eq!(fields(&[0x08]), Err(WireError::Truncated));
        assert_eq!(fields(&[0x12, 0x05, b'a']), Err(WireError::Truncated));
        assert_eq!(fields(&[0x00, 0x00]), Err(WireError::BadFieldNumber));
        assert_eq!(fields(&[0x0b]), Err(WireError::UnsupportedWireType(1)));
        let long = [
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
        ];
        assert_eq!(fields(&long), Err(WireError::VarintOverflow));
        assert_eq!(
            fields(&[0x12, 0x01, 0xff]).unwrap()[0].str(),
            Err(WireError::NotUtf8(2))
        );
        assert!(matches!(
            fields(&[0x08, 0x01]).unwrap()[0].bytes(),
            Err(WireError::WrongType { field: 1, .. })
        ));
    }

    #[test]
    fn map_entries_default_missing_parts() {
        assert_eq!(
            map_entry(&[0x0a, 0x01, b'k', 0x12, 0x01, b'v']).unwrap(),
            ("k", &b"v"[..])
        );
        assert_eq!(map_entry(&[0x0a, 0x01, b'k']).unwrap(), ("k", &b""[..]));
        assert_eq!(map_entry(&[]).unwrap(), ("", &b""[..]));
    }
}
