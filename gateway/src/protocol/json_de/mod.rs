//! A JSON deserializer for request bodies: serde's data model over a byte slice, as
//! `serde_json::from_slice` gives it, with each number converted in the same pass that
//! validates it.
//!
//! Why our own: a single-row request is hundreds of numbers of 16–17 digits, and at
//! saturation serde_json's number parsing is a large share of the server's CPU; its
//! validating scan already costs about what its whole parse does, so nothing layered on it
//! could be faster (`cargo bench -p gateway --bench json`; docs/performance.md, "Decoding a
//! JSON request"). Here the digits are read eight at a time, and a number that fits the
//! exact fast path (at most 19 significant digits, a power of ten that f64 holds exactly)
//! takes no second pass.
//!
//! It accepts exactly what serde_json accepts (RFC 8259, UTF-8, nesting less than 128 deep)
//! and hands visitors the same calls: `visit_u64` for non-negative integers that fit,
//! `visit_i64` for negative ones, `visit_f64` otherwise (a number beyond f64's range is an
//! error), borrowed strings when they hold no escapes. The differential tests below hold it
//! to that. Numbers are at least as accurate as serde_json's default: correctly rounded,
//! except mantissas between 2^53 and 10^19 scaled by at most 10^±22, which are within one
//! unit in the last place of f64, and exact whenever the text is an f32 printed in full.

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// Arrays and objects nested this deep are refused (as serde_json refuses them), so a
/// hostile body cannot exhaust the stack.
const MAX_DEPTH: usize = 128;

#[derive(Debug)]
pub struct Error {
    message: String,
    /// 1-based; 0 until `from_slice` places it. (`u32`: a body is at most a few MiB, and the
    /// error stays as small as `Result`s on the parse path had it.)
    line: u32,
    column: u32,
    /// Whether the bytes were JSON of another shape (a wrong type, a missing field), as
    /// serde_json's `Category::Data`, rather than not JSON at all.
    data: bool,
}

impl Error {
    /// JSON, but not of the shape asked for: a value of the wrong type, a field missing.
    pub fn is_data(&self) -> bool {
        self.data
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {} column {}",
            self.message, self.line, self.column
        )
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Error {
            message: message.to_string(),
            line: 0,
            column: 0,
            data: true,
        }
    }
}

/// Deserializes one JSON value from `input`; anything but whitespace after it is an error.
pub fn from_slice<'de, T: Deserialize<'de>>(input: &'de [u8]) -> Result<T, Error> {
    let mut reader = Reader {
        input,
        pos: 0,
        depth: 0,
    };
    let result = T::deserialize(&mut reader).and_then(|value| {
        reader.skip_whitespace();
        match reader.peek() {
            None => Ok(value),
            Some(_) => Err(reader.error("trailing characters")),
        }
    });
    // Errors leave the reader where they were found (every path returns at once), so the
    // position is read here rather than threaded through serde's own errors.
    result.map_err(|mut e| {
        if e.line == 0 {
            let before = &input[..reader.pos.min(input.len())];
            let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
            let column = 1 + before.iter().rev().take_while(|&&b| b != b'\n').count();
            e.line = u32::try_from(line).unwrap_or(u32::MAX);
            e.column = u32::try_from(column).unwrap_or(u32::MAX);
        }
        e
    })
}

struct Reader<'de> {
    input: &'de [u8],
    pos: usize,
    depth: usize,
}

enum Number {
    U64(u64),
    I64(i64),
    F64(f64),
}

enum Text<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl<'de> Reader<'de> {
    /// Bytes that are not JSON (or JSON past what is accepted: too deep, a number out of
    /// range).
    fn error(&self, message: &str) -> Error {
        Error {
            data: false,
            ..de::Error::custom(message)
        }
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect_literal(&mut self, literal: &[u8]) -> Result<(), Error> {
        if self.input[self.pos..].starts_with(literal) {
            self.pos += literal.len();
            Ok(())
        } else {
            Err(self.error("expected value"))
        }
    }

    fn enter(&mut self) -> Result<(), Error> {
        self.depth += 1;
        if self.depth >= MAX_DEPTH {
            return Err(self.error("recursion limit exceeded"));
        }
        self.pos += 1;
        Ok(())
    }

    /// Expects `close` (after whitespace) where a visitor stopped reading a container.
    fn leave(&mut self, close: u8) -> Result<(), Error> {
        self.skip_whitespace();
        if self.peek() != Some(close) {
            return Err(self.error(if close == b']' {
                "trailing elements in array"
            } else {
                "trailing members in object"
            }));
        }
        self.pos += 1;
        self.depth -= 1;
        Ok(())
    }

    /// Between a container's items: whether another follows before `close`, having
    /// stepped over the comma that separates it from the one before.
    fn next_item(&mut self, first: &mut bool, close: u8) -> Result<bool, Error> {
        self.skip_whitespace();
        match self.peek() {
            Some(b) if b == close => return Ok(false),
            Some(b',') if !*first => {
                self.pos += 1;
                self.skip_whitespace();
                if self.peek() == Some(close) {
                    return Err(self.error("trailing comma"));
                }
            }
            Some(_) if *first => {}
            Some(_) if close == b']' => return Err(self.error("expected `,` or `]`")),
            Some(_) => return Err(self.error("expected `,` or `}`")),
            None => return Err(self.error("EOF while parsing a list or an object")),
        }
        *first = false;
        Ok(true)
    }

    fn parse_string(&mut self) -> Result<Text<'de>, Error> {
        self.pos += 1; // the opening quote
        let start = self.pos;
        loop {
            match self.peek() {
                None => return Err(self.error("EOF while parsing a string")),
                Some(b'"') => {
                    let text = std::str::from_utf8(&self.input[start..self.pos])
                        .map_err(|_| self.error("invalid unicode in string"))?;
                    self.pos += 1;
                    return Ok(Text::Borrowed(text));
                }
                Some(b'\\') => break,
                Some(0..=0x1f) => {
                    return Err(self.error("control character (\\u0000-\\u001F) in string"));
                }
                Some(_) => self.pos += 1,
            }
        }
        // An escape: copy from here on.
        let mut bytes = self.input[start..self.pos].to_vec();
        loop {
            match self.peek() {
                None => return Err(self.error("EOF while parsing a string")),
                Some(b'"') => {
                    self.pos += 1;
                    return String::from_utf8(bytes)
                        .map(Text::Owned)
                        .map_err(|_| self.error("invalid unicode in string"));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.parse_escape(&mut bytes)?;
                }
                Some(0..=0x1f) => {
                    return Err(self.error("control character (\\u0000-\\u001F) in string"));
                }
                Some(b) => {
                    bytes.push(b);
                    self.pos += 1;
                }
            }
        }
    }

    /// After a backslash: appends what the escape stands for.
    fn parse_escape(&mut self, bytes: &mut Vec<u8>) -> Result<(), Error> {
        let escaped = self.peek().ok_or_else(|| self.error("EOF in escape"))?;
        self.pos += 1;
        let simple = match escaped {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let c = self.parse_unicode_escape()?;
                bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                return Ok(());
            }
            _ => return Err(self.error("invalid escape")),
        };
        bytes.push(simple);
        Ok(())
    }

    /// After `\u`: four hex digits, and a second escape when they are a leading surrogate.
    fn parse_unicode_escape(&mut self) -> Result<char, Error> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if !self.input[self.pos..].starts_with(b"\\u") {
                    return Err(self.error("lone leading surrogate in hex escape"));
                }
                self.pos += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.error("lone leading surrogate in hex escape"));
                }
                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.error("lone trailing surrogate in hex escape")),
            _ => first,
        };
        char::from_u32(code).ok_or_else(|| self.error("invalid unicode code point"))
    }

    fn hex4(&mut self) -> Result<u32, Error> {
        let digits = self
            .input
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.error("EOF in escape"))?;
        let mut code = 0;
        for &b in digits {
            let d = (b as char)
                .to_digit(16)
                .ok_or_else(|| self.error("invalid escape"))?;
            code = code * 16 + d;
        }
        self.pos += 4;
        Ok(code)
    }
}

impl<'de> de::Deserializer<'de> for &mut Reader<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => match self.parse_number()? {
                Number::U64(v) => visitor.visit_u64(v),
                Number::I64(v) => visitor.visit_i64(v),
                Number::F64(v) => visitor.visit_f64(v),
            },
            Some(b'"') => match self.parse_string()? {
                Text::Borrowed(s) => visitor.visit_borrowed_str(s),
                Text::Owned(s) => visitor.visit_string(s),
            },
            Some(b'[') => {
                self.enter()?;
                let value = visitor.visit_seq(Elements {
                    reader: self,
                    first: true,
                })?;
                self.leave(b']')?;
                Ok(value)
            }
            Some(b'{') => {
                self.enter()?;
                let value = visitor.visit_map(Members {
                    reader: self,
                    first: true,
                })?;
                self.leave(b'}')?;
                Ok(value)
            }
            Some(b't') => {
                self.expect_literal(b"true")?;
                visitor.visit_bool(true)
            }
            Some(b'f') => {
                self.expect_literal(b"false")?;
                visitor.visit_bool(false)
            }
            Some(b'n') => {
                self.expect_literal(b"null")?;
                visitor.visit_unit()
            }
            None => Err(self.error("EOF while parsing a value")),
            Some(_) => Err(self.error("expected value")),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.skip_whitespace();
        if self.peek() == Some(b'n') {
            self.expect_literal(b"null")?;
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    /// Only an object. serde's derived structs also take an array, filling the fields by
    /// position (serde_json allows it); no protocol of this server defines one, and a
    /// positional `[null, [input]]` must not pass for a request.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'[') => {
                // Read through, so that an array that is not JSON is refused as such.
                de::IgnoredAny::deserialize(&mut *self)?;
                Err(de::Error::custom(format!(
                    "expected a JSON object for {}, got an array",
                    describe(name)
                )))
            }
            // Objects, and whatever else the visitor refuses with its own message.
            _ => self.deserialize_any(visitor),
        }
    }

    /// Unit variants, spelled as strings (`"static"`): all the enums clients send.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        use serde::de::IntoDeserializer;
        self.skip_whitespace();
        if self.peek() != Some(b'"') {
            return Err(de::Error::custom("expected a string"));
        }
        match self.parse_string()? {
            Text::Borrowed(s) => visitor.visit_enum(s.into_deserializer()),
            Text::Owned(s) => visitor.visit_enum(s.into_deserializer()),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

/// A struct's name as a reader of the error knows it: `InferRequest` → "the inference
/// request".
fn describe(name: &'static str) -> String {
    match name {
        "InferRequest" => "the inference request".into(),
        "InputTensor" => "an input tensor".into(),
        "RequestedOutput" => "a requested output".into(),
        "RequestParameters" | "TensorParameters" => "parameters".into(),
        _ => "this value".into(),
    }
}

/// An array's elements, each read by the visitor through the same reader.
struct Elements<'a, 'de> {
    reader: &'a mut Reader<'de>,
    first: bool,
}

impl<'de> SeqAccess<'de> for Elements<'_, 'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        if !self.reader.next_item(&mut self.first, b']')? {
            return Ok(None);
        }
        seed.deserialize(&mut *self.reader).map(Some)
    }
}

/// An object's members: string keys, each followed by a colon and a value.
struct Members<'a, 'de> {
    reader: &'a mut Reader<'de>,
    first: bool,
}

impl<'de> MapAccess<'de> for Members<'_, 'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if !self.reader.next_item(&mut self.first, b'}')? {
            return Ok(None);
        }
        let r = &mut *self.reader;
        if r.peek() != Some(b'"') {
            return Err(r.error("key must be a string"));
        }
        seed.deserialize(&mut *self.reader).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let r = &mut *self.reader;
        r.skip_whitespace();
        if r.peek() != Some(b':') {
            return Err(r.error("expected `:`"));
        }
        r.pos += 1;
        seed.deserialize(&mut *self.reader)
    }
}

mod number;
#[cfg(test)]
mod tests;
